// File: runtime/sched/request.h
// What a client asks for (gen_request) and what the serving core answers
// (token_event per generated token, finish_event per sample). Plain values:
// the actor layer copies them into messages, the protocol layer into capnp.
//
//   gen_request r;
//   r.id = 7; r.prompt = ids; r.max_new_tokens = 32; r.n = 4; r.temperature = 0.8f; r.seed = 1;
//   HART_RETURN_IF_ERROR(r.validate(vocab_size));
#pragma once

#include "runtime/core/status.h"
#include "runtime/sample/sampler.h"
#include "runtime/sched/routing_trace.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hart::sched {

/// Hard limits on a request's fan-out (user input beyond them is invalid_argument).
constexpr int32_t max_samples = 64;
constexpr int32_t max_top_logprobs = 20;

struct gen_request {
  uint64_t id = 0;              // unique among live requests
  std::vector<int32_t> prompt;  // token ids, non-empty
  // -- sampling ---
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  uint64_t seed = 0;  // sample i uses seed + i
  // -- stopping ---
  int64_t max_new_tokens = 16;    // 0: no token (the prompt scored, logprob_start)
  int64_t min_new_tokens = 0;     // EOS, stop ids and stop strings are ignored before it
  std::vector<std::string> stop;  // matched on the detokenized text, never emitted
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // -- fan-out and outputs ---
  int32_t n = 1;  // samples; each its own sequence sharing the prompt's cached prefix
  bool logprobs = false;
  int32_t top_logprobs = 0;
  /// Return each sample's routing (routing_trace.h) in its finish event. Its
  /// prompt is then computed in full, never taken from the prefix cache (a
  /// cached position has no routing to return).
  bool return_routing = false;
  /// With return_routing: the indexer picks too (index_topk ids per CSA layer
  /// and position, ~40x the experts' size on V4); else only the experts.
  bool return_indexer_picks = false;
  /// >= 0: the log-probability of every prompt token from this position on
  /// under the model (log softmax of the previous position's logits; none for
  /// position 0), in each sample's finish event (SGLang's logprob_start_len).
  /// Like return_routing, the prompt is then computed in full. With
  /// max_new_tokens 0 the request only scores its prompt.
  int64_t logprob_start = -1;
  // -- scheduling ---
  int32_t priority = 0;     // larger is served first; within a priority, clients take turns (scheduler.h)
  uint64_t client = 0;      // who asked (the gateway's key of the connection); 0 = one shared client
  int64_t deadline_us = 0;  // absolute, on the scheduler's clock; 0 = none; past it: finish abort

  /// Every check of a request's values, in one place: the gateway runs it before it
  /// accepts a request (so a refusal is an error reply) and scheduler::submit again.
  /// `max_context` > 0: the prompt must leave room for a token under it (out_of_range).
  status validate(int32_t vocab_size, int64_t max_context = 0) const;
  /// Sampling parameters of sample `i` (seed + i).
  sampling_params sampling(int32_t i) const;
};

enum class finish_reason { stop, length, abort, error };

struct token_logprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

/// One generated token of one sample.
struct token_event {
  uint64_t request_id = 0;
  int32_t sample = 0;
  int32_t token = 0;
  /// log-probability under the distribution actually sampled (see
  /// sampling_logprobs.h); 0 unless the request asked for logprobs.
  float logprob = 0.0f;
  std::vector<token_logprob> top_logprobs;  // best first; empty unless asked for
  std::string text;                         // complete UTF-8 released by this token (may be empty: held back)
  int64_t produced_us = 0;  // steady-clock µs when the step that produced it ended; 0 = unknown
};

/// The end of one sample. Timings are µs from submission.
struct finish_event {
  uint64_t request_id = 0;
  int32_t sample = 0;
  finish_reason reason = finish_reason::stop;
  std::string message;  // why, for abort and error
  /// The request was refused before it started (reason error, one event for all its samples):
  /// the client gets one error reply with `code`, not finals.
  bool refused = false;
  status_code code = status_code::ok;
  std::string text;  // held-back text released at the end (abort, error)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  /// gen_request::logprob_start >= 0: the prompt's log-probs from that position to its end
  /// (NaN for position 0, which nothing predicts).
  std::vector<float> input_logprobs;
  int64_t queued_us = 0;  // until first scheduled
  int64_t ttft_us = -1;   // until the first token; -1 if none
  int64_t total_us = 0;
  /// gen_request::return_routing: every computed position (the prompt and all
  /// generated tokens but the last, which was never fed); empty otherwise.
  routing_trace routing;
};

/// Events in the order they happened (tokens of a sample precede its finish).
struct event_batch {
  std::vector<token_event> tokens;
  std::vector<finish_event> finishes;

  bool empty() const { return tokens.empty() && finishes.empty(); }
  void append(event_batch&& o);
};

}  // namespace hart::sched
