#include "runtime/http/exchange.h"

#include "runtime/http/api_error.h"

namespace hart::http {

status_or<protocol::reply> exchange::control(protocol::control_request c, std::chrono::milliseconds timeout) {
  submit_(client_, c, replies_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::optional<protocol::reply> r = replies_->pop(left);
    if (!r) break;
    if (std::holds_alternative<protocol::ack_reply>(*r) ||
        std::holds_alternative<protocol::health_reply>(*r) ||
        std::holds_alternative<protocol::stats_reply>(*r) ||
        std::holds_alternative<protocol::weight_version_reply>(*r) ||
        std::holds_alternative<protocol::error_reply>(*r)) {
      return std::move(*r);
    }
  }
  return unavailable("control: the server did not answer within %lld ms", (long long)timeout.count());
}

void exchange::submit(protocol::generate_request g) {
  g.request_id = k_exchange_request_id;
  submit_(client_, std::move(g), replies_);
}

std::optional<protocol::reply> exchange::next(std::chrono::milliseconds timeout) {
  std::optional<protocol::reply> r = replies_->pop(timeout);
  auto* f = r ? std::get_if<protocol::final_event>(&*r) : nullptr;
  if (f && f->reason == protocol::finish_reason::abort && f->error_message.empty()) {
    std::lock_guard<std::mutex> lock(abort_m_);
    f->error_message = abort_reason_.empty() ? k_abort_unexplained : abort_reason_;
  }
  return r;
}

void exchange::name_abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(abort_m_);
  if (abort_reason_.empty()) abort_reason_ = why;
}

void exchange::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abort_m_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = why;  // a pause may have named it without reaching it (it came just before)
  }
  protocol::control_request c;
  c.tag = k_abort_tag;
  c.verb = protocol::control_verb::abort;
  c.request_id = k_exchange_request_id;
  submit_(client_, c, replies_);
}

}  // namespace hart::http
