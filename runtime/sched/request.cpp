#include "runtime/sched/request.h"

namespace hart::sched {

status gen_request::validate(int32_t vocab_size, int64_t max_context) const {
  if (prompt.empty()) return invalid_argument("empty prompt");
  if (max_context > 0 && int64_t(prompt.size()) >= max_context) {
    return out_of_range("prompt of %zu tokens leaves no room under max_context %lld", prompt.size(),
                        (long long)max_context);
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return invalid_argument("prompt token %d at %zu outside [0, %d)", prompt[i], i, vocab_size);
    }
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) return invalid_argument("stop token %d outside [0, %d)", t, vocab_size);
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("empty stop string");
  }
  if (max_new_tokens < 0) return invalid_argument("max_new_tokens %lld < 0", (long long)max_new_tokens);
  if (logprob_start < -1 || logprob_start >= int64_t(prompt.size())) {
    return invalid_argument("logprob_start %lld not in [-1, %zu) (the prompt's positions)",
                            (long long)logprob_start, prompt.size());
  }
  if (min_new_tokens < 0 || min_new_tokens > max_new_tokens) {
    return invalid_argument("min_new_tokens %lld not in [0, max_new_tokens=%lld]", (long long)min_new_tokens,
                            (long long)max_new_tokens);
  }
  if (n < 1 || n > max_samples) return invalid_argument("n %d not in [1, %d]", n, max_samples);
  if (top_logprobs < 0 || top_logprobs > max_top_logprobs) {
    return invalid_argument("top_logprobs %d not in [0, %d]", top_logprobs, max_top_logprobs);
  }
  if (deadline_us < 0) return invalid_argument("deadline_us %lld < 0", (long long)deadline_us);
  return sampling(0).validate();
}

sampling_params gen_request::sampling(int32_t i) const {
  sampling_params p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed + uint64_t(i);
  return p;
}

void event_batch::append(event_batch&& o) {
  for (token_event& e : o.tokens) tokens.push_back(std::move(e));
  for (finish_event& e : o.finishes) finishes.push_back(std::move(e));
}

}  // namespace hart::sched
