#include "runtime/http/generation.h"

#include <algorithm>

namespace hart::http {

generation::generation(const protocol::sampling_options& s, int32_t eos_token_id)
    : samples_(std::max<uint32_t>(1, s.n)), stop_ids_(s.stop_token_ids), min_new_tokens_(s.min_new_tokens) {
  if (eos_token_id >= 0 && !s.ignore_eos) stop_ids_.push_back(uint32_t(eos_token_id));
}

int generation::apply(const protocol::reply& r) {
  if (const auto* c = std::get_if<protocol::chunk_event>(&r)) {
    if (c->sample_index >= samples_.size()) return -1;
    sample_output& s = samples_[c->sample_index];
    s.token_ids.insert(s.token_ids.end(), c->token_ids.begin(), c->token_ids.end());
    s.logprobs.insert(s.logprobs.end(), c->logprobs.begin(), c->logprobs.end());
    s.top_logprobs.insert(s.top_logprobs.end(), c->top_logprobs.begin(), c->top_logprobs.end());
    s.text += c->text;
    weight_version_ = c->weight_version;
    return int(c->sample_index);
  }
  if (const auto* f = std::get_if<protocol::final_event>(&r)) {
    if (f->sample_index >= samples_.size() || samples_[f->sample_index].finished) return -1;
    sample_output& s = samples_[f->sample_index];
    s.finished = true;
    s.final = *f;
    weight_version_ = f->weight_version;
    ++n_finished_;
    return int(f->sample_index);
  }
  // Errors of this generation carry tag 0; a control verb's (an abort that came too late) its own tag.
  if (const auto* e = std::get_if<protocol::error_reply>(&r); e && e->tag == 0) {
    error_ = status(e->code, e->message);
  }
  return -1;
}

bool generation::is_stop_token(uint32_t id, size_t index) const {
  return index + 1 >= min_new_tokens_ && std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

size_t generation::n_tokens(size_t i, bool trim) const {
  const sample_output& s = samples_.at(i);
  const size_t n = s.token_ids.size();
  if (trim && s.finished && s.final.reason == protocol::finish_reason::stop && n > 0 &&
      is_stop_token(s.token_ids.back(), n - 1)) {
    return n - 1;
  }
  return n;
}

}  // namespace hart::http
