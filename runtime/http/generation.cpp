#include "runtime/http/generation.h"

#include <algorithm>
#include <string_view>

namespace hart::http {

generation::generation(const protocol::sampling_options& s, int32_t eos_token_id)
    : samples_(std::max<uint32_t>(1, s.n)), stop_ids_(s.stop_token_ids), min_new_tokens_(s.min_new_tokens) {
  if (eos_token_id >= 0 && !s.ignore_eos) stop_ids_.push_back(uint32_t(eos_token_id));
}

namespace {

constexpr std::string_view k_think_end = "</think>";

// The length of the longest suffix of `s` that begins "</think>".
size_t marker_prefix_at_end(const std::string& s) {
  for (size_t n = std::min(s.size(), k_think_end.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, k_think_end.data(), n) == 0) return n;
  }
  return 0;
}

// SGLang's routed_experts is one [positions, layers, k] tensor: every MoE layer routes to the
// model's num_experts_per_tok experts at each position.
status routing_check(const protocol::routing_info& r) {
  for (const protocol::layer_routing& l : r.experts) {
    if (l.k != r.experts[0].k || l.ids.size() != size_t(r.positions) * l.k)
      return internal_error("routing of layer %u: %zu ids for %u positions of k = %u (layer %u has k = %u)",
                            l.layer, l.ids.size(), r.positions, l.k, r.experts[0].layer, r.experts[0].k);
  }
  return {};
}

}  // namespace

void generation::split_reasoning(std::optional<int32_t> think_end_id) {
  split_ = true;
  think_end_id_ = think_end_id;
  reasoning_open_.assign(samples_.size(), true);
  held_.assign(samples_.size(), std::string());
}

void generation::route_text(size_t i, const protocol::chunk_event& c) {
  sample_output& s = samples_[i];
  s.text_delta.clear();
  s.reasoning_delta.clear();
  if (!split_ || !reasoning_open_[i]) {
    s.text_delta = c.text;
    return;
  }
  const bool marker_token = think_end_id_ && std::find(c.token_ids.begin(), c.token_ids.end(),
                                                       uint32_t(*think_end_id_)) != c.token_ids.end();
  std::string pending = std::move(held_[i]) + c.text;
  held_[i].clear();
  if (const size_t at = pending.find(k_think_end); at != std::string::npos) {
    s.reasoning_delta = pending.substr(0, at);
    s.text_delta = pending.substr(at + k_think_end.size());
    reasoning_open_[i] = false;
  } else if (marker_token) {  // a special token: its text is not in the output
    s.reasoning_delta = std::move(pending);
    reasoning_open_[i] = false;
  } else {
    const size_t keep = marker_prefix_at_end(pending);
    held_[i] = pending.substr(pending.size() - keep);
    pending.resize(pending.size() - keep);
    s.reasoning_delta = std::move(pending);
  }
}

int generation::apply(const protocol::reply& r) {
  if (const auto* c = std::get_if<protocol::chunk_event>(&r)) {
    if (c->sample_index >= samples_.size()) return -1;
    sample_output& s = samples_[c->sample_index];
    s.token_ids.insert(s.token_ids.end(), c->token_ids.begin(), c->token_ids.end());
    s.logprobs.insert(s.logprobs.end(), c->logprobs.begin(), c->logprobs.end());
    s.top_logprobs.insert(s.top_logprobs.end(), c->top_logprobs.begin(), c->top_logprobs.end());
    route_text(c->sample_index, *c);
    s.text += s.text_delta;
    s.reasoning += s.reasoning_delta;
    weight_version_ = c->weight_version;
    return int(c->sample_index);
  }
  if (const auto* p = std::get_if<protocol::routing_part>(&r)) {
    protocol::routing_part part = *p;
    if (status st = routing_.add(std::move(part)); !st.ok())
      error_ = internal_error("%s", st.message().c_str());
    return -1;
  }
  if (const auto* f = std::get_if<protocol::final_event>(&r)) {
    if (f->sample_index >= samples_.size() || samples_[f->sample_index].finished) return -1;
    sample_output& s = samples_[f->sample_index];
    s.final = *f;
    if (status st = routing_.complete(&s.final); !st.ok())
      error_ = internal_error("%s", st.message().c_str());
    if (status st = routing_check(s.final.routing); !st.ok()) error_ = st;
    s.text_delta.clear();
    s.reasoning_delta.clear();
    if (split_ && !held_[f->sample_index].empty()) {  // never closed: what was held is reasoning too
      s.reasoning_delta = std::move(held_[f->sample_index]);
      held_[f->sample_index].clear();
      s.reasoning += s.reasoning_delta;
    }
    s.finished = true;
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
