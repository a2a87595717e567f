// File: runtime/sched/stop_rules.h
// When a sample stops, and which text it may release so far. Fed one
// generated token at a time:
// - EOS (unless ignore_eos) and stop token ids end the sample; the token is
//   reported but its text is not emitted;
// - stop strings are matched on the detokenized text across token
//   boundaries; text that could still be the start of a stop string is held
//   back, and the stop string itself (and anything after it) is never emitted;
// - before min_new_tokens, EOS, stop ids and stop strings are ignored (a stop
//   string must lie wholly in text released from that token on);
// - max_new_tokens ends the sample with reason length.
//
//   stop_rules r(req, &tok, eos_id);
//   stop_outcome o = r.push(token);   // o.text: release now; o.done: sample ends
#pragma once

#include "runtime/sched/request.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hart::sched {

struct stop_outcome {
  std::string text;  // complete UTF-8 released by this token
  bool done = false;
  finish_reason reason = finish_reason::stop;  // valid when done
};

class stop_rules {
 public:
  /// `tok` may be null: no text, stop strings never match. eos_token_id < 0: none.
  stop_rules(const gen_request& r, const tokenizer* tok, int32_t eos_token_id);

  /// The sample generated `token` (its n_generated()-th, counting from 1 after the call).
  stop_outcome push(int32_t token);
  /// Everything held back (an incomplete UTF-8 tail as U+FFFD); used when the
  /// sample ends for another reason (abort, error).
  std::string release();
  int64_t n_generated() const { return n_generated_; }

 private:
  /// Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t hold_length() const;

  std::optional<stream_decoder> dec_;
  std::vector<std::string> stop_;
  std::vector<int32_t> stop_ids_;
  int32_t eos_ = -1;
  int64_t min_new_ = 0, max_new_ = 0;
  int64_t n_generated_ = 0;
  std::string held_;  // decoded, not yet released
};

}  // namespace hart::sched
