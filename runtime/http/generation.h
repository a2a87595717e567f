// File: runtime/http/generation.h
// One HTTP generation as the gateway streams it back (runtime/protocol chunk and final
// replies, one token per chunk): per sample the tokens, text, log-probs and final. Also which
// trailing token is the stop token that ended a sample (EOS unless ignore_eos, or a stop id,
// once min_new_tokens are out: sched/stop_rules.h). Its text is never emitted; the OpenAI
// responses leave it out, SGLang's keep it only with no_stop_trim. In thinking mode it splits
// each sample's text into reasoning and answer.
//
//   generation gen(g.sampling, eos_id);
//   while (!gen.done()) if (auto r = ex.next(50ms)) gen.apply(*r);
//   gen.sample(0).text;
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"
#include "runtime/protocol/routing_parts.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hart::http {

struct sample_output {
  std::vector<uint32_t> token_ids;
  std::vector<float> logprobs;                                     // one per token when asked
  std::vector<std::vector<protocol::token_logprob>> top_logprobs;  // one list per token when asked
  std::string text;       ///< the answer (after the reasoning, when split_reasoning)
  std::string reasoning;  ///< split_reasoning: the thinking before "</think>"
  /// What the last chunk applied added to text and to reasoning.
  std::string text_delta, reasoning_delta;
  bool finished = false;
  /// Valid once finished; its routing joined from the routing parts that came before it.
  protocol::final_event final;
};

class generation {
 public:
  /// `eos_token_id` < 0: none.
  generation(const protocol::sampling_options& s, int32_t eos_token_id);

  /// DeepSeek-V4 thinking mode: the prompt ended "<think>", so each sample's output is its
  /// reasoning up to "</think>" (the token `think_end_id`, or the text where that token is not
  /// special) and its answer after it; reasoning and text get them apart (SGLang's deepseek-v4
  /// reasoning parser). A sample that never closes its thinking is all reasoning.
  void split_reasoning(std::optional<int32_t> think_end_id);

  /// Applies one reply of this generation's exchange and returns the sample it extended or
  /// ended; -1 for replies that show nothing yet (routing parts), that are not part of it
  /// (control answers), or for an error reply, which ends the whole generation (error()), as
  /// does a routing that does not join into [positions, k] per layer with one k.
  int apply(const protocol::reply& r);

  /// Every sample has its final, or the request failed.
  bool done() const { return !error_.ok() || n_finished_ == samples_.size(); }
  /// The gateway refused the request (error reply): nothing was generated.
  const status& error() const { return error_; }
  size_t size() const { return samples_.size(); }
  const sample_output& sample(size_t i) const { return samples_.at(i); }

  /// Whether token `id`, generated as number `index` (from 0) of its sample, ends it as a stop token.
  bool is_stop_token(uint32_t id, size_t index) const;
  /// Sample i's tokens without its ending stop token when `trim`.
  size_t n_tokens(size_t i, bool trim) const;
  /// Weight version of the latest reply (SGLang's weight_version).
  uint64_t weight_version() const { return weight_version_; }

 private:
  std::vector<sample_output> samples_;
  std::vector<uint32_t> stop_ids_;
  uint32_t min_new_tokens_ = 0;
  size_t n_finished_ = 0;
  status error_;
  uint64_t weight_version_ = 0;
  protocol::routing_assembler routing_;
  bool split_ = false;
  std::optional<int32_t> think_end_id_;
  /// Per sample, while split_: still reasoning; bytes held back that may start "</think>".
  std::vector<bool> reasoning_open_;
  std::vector<std::string> held_;
  void route_text(size_t i, const protocol::chunk_event& c);
};

}  // namespace hart::http
