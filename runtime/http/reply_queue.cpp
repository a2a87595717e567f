#include "runtime/http/reply_queue.h"

namespace hart::http {

bool reply_queue::push(protocol::reply r) {
  {
    std::lock_guard<std::mutex> lock(m_);
    const bool chunk = std::holds_alternative<protocol::chunk_event>(r);
    if (q_.size() >= chunk_capacity_ + (chunk ? 0 : headroom_)) {
      overflowed_ = true;
      return false;
    }
    q_.push_back(std::move(r));
  }
  cv_.notify_one();
  return true;
}

std::optional<protocol::reply> reply_queue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return std::nullopt;
  protocol::reply r = std::move(q_.front());
  q_.pop_front();
  return r;
}

bool reply_queue::overflowed() const {
  std::lock_guard<std::mutex> lock(m_);
  return overflowed_;
}

}  // namespace hart::http
