#include "runtime/sched/stop_rules.h"

#include <algorithm>

namespace hart::sched {

stop_rules::stop_rules(const gen_request& r, const tokenizer* tok, int32_t eos_token_id)
    : stop_(r.stop),
      stop_ids_(r.stop_token_ids),
      eos_(r.ignore_eos ? -1 : eos_token_id),
      min_new_(r.min_new_tokens),
      max_new_(r.max_new_tokens) {
  if (tok) dec_.emplace(*tok, /*skip_special=*/true);
  if (!tok) stop_.clear();
}

size_t stop_rules::hold_length() const {
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(held_.size(), s.size() - 1); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  return keep;
}

stop_outcome stop_rules::push(int32_t token) {
  stop_outcome out;
  ++n_generated_;
  const bool armed = n_generated_ >= min_new_;
  if (armed && (token == eos_ || std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end())) {
    out.text = std::move(held_);  // the stop token's own text is not emitted
    held_.clear();
    out.done = true;
    out.reason = finish_reason::stop;
    return out;
  }
  if (dec_) {
    status_or<std::string> t = dec_->push(token);
    if (t.ok()) held_ += *t;  // ids were validated by the scheduler; a bad one adds no text
  }
  if (armed) {
    size_t best = std::string::npos;
    for (const std::string& s : stop_) best = std::min(best, held_.find(s));
    if (best != std::string::npos) {
      out.text = held_.substr(0, best);
      held_.clear();
      out.done = true;
      out.reason = finish_reason::stop;
      return out;
    }
  }
  if (n_generated_ >= max_new_) {
    out.text = release();
    out.done = true;
    out.reason = finish_reason::length;
    return out;
  }
  // A suffix matching a stop string's start is split at a character boundary:
  // the stop string begins with a UTF-8 lead byte.
  const size_t keep = armed ? hold_length() : 0;
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string stop_rules::release() {
  std::string s = std::move(held_);
  held_.clear();
  if (dec_) s += dec_->flush();
  return s;
}

}  // namespace hart::sched
