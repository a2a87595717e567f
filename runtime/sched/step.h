// File: runtime/sched/step.h
// The unit of work between the scheduler and a worker: a step_plan says, for
// each sequence of one batch, which tokens to feed at which positions of which
// pages, and whether to sample after its last position; the step_result brings
// back the sampled tokens. Both are plain values (copyable into messages; a
// remote worker needs nothing else: page tables travel with the plan, and each
// step's sampling seed is derived from the sequence's seed and its token count,
// so a worker keeps no per-sequence state).
#pragma once

#include "runtime/core/status.h"
#include "runtime/sample/sampler.h"
#include "runtime/sched/request.h"

#include <cstdint>
#include <vector>

namespace hart::sched {

struct step_item {
  uint64_t seq_id = 0;  // the scheduler's key for this sequence
  uint64_t request_id = 0;
  int32_t sample = 0;
  std::vector<int32_t> tokens;      // fed at positions n_computed, n_computed + 1, ...
  std::vector<int32_t> full_pages;  // the cache's page table (shadow_radix::pages)
  std::vector<int32_t> swa_pages;
  int64_t n_computed = 0;    // positions that already hold valid KV
  bool sample_last = false;  // sample a token from the last fed position's logits
  sampling_params sampling;  // this step's parameters (seed already derived)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool capture_routing = false;  // return this item's routing in the result
  /// Return the log-prob of the token after each fed position (prompt log-probs): tokens[r + 1]
  /// for row r, and for the last row `next_token` (the prompt's next token; -1: none).
  bool prompt_logprobs = false;
  int32_t next_token = -1;
  /// tokens = {placeholder}: feed the token this worker sampled for seq_id in
  /// the step before (scheduler::schedule_ahead; fill_planned_ahead).
  bool feed_last_sampled = false;
  /// A speculative verify item (docs/spec-decode.md §5): the last
  /// draft_seeds.size() tokens are drafts after the sequence's next token
  /// (tokens[0]); every row gets logits, and row j + 1 draws with seed
  /// draft_seeds[j] (sampling.seed is row 0's) as non-speculative decoding
  /// would at that position. The worker keeps the drafts up to the first
  /// draw that differs, emits that draw too, and takes the rest of the pass
  /// back: the result holds one sampled_token per kept draft, then the draw.
  std::vector<uint64_t> draft_seeds;
  int64_t n_drafts() const { return int64_t(draft_seeds.size()); }
  /// Drafting with the MTP block (docs/spec-decode.md §6.3): after the pass,
  /// write the block's window KV of the positions this item keeps (the token
  /// after each: the item's next fed token, then the token it emits, or
  /// next_token for a chunk that samples nothing: -1 leaves its last position
  /// out) ...
  bool mtp_kv = false;
  /// ... and, for an item that samples, draft this many tokens after the last
  /// one it emits (the block's argmax, chained): step_result::drafts.
  int32_t mtp_drafts = 0;
};

struct step_plan {
  uint64_t step = 0;  // matches the step_result
  std::vector<step_item> items;

  bool empty() const { return items.empty(); }
  int64_t n_tokens() const;
};

struct sampled_token {
  uint64_t seq_id = 0;
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<token_logprob> top_logprobs;
};

struct item_routing {
  uint64_t seq_id = 0;
  routing_trace trace;  // positions = the item's tokens, from its n_computed
};

struct item_logprobs {
  uint64_t seq_id = 0;
  /// Row r: log softmax(logits at position n_computed + r)[the token after it]; one per fed
  /// token, the last NaN when the item had no next_token.
  std::vector<float> next;
};

/// The drafts an item's step made for the sequence's next step (mtp_drafts).
struct item_drafts {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;  // at most mtp_drafts (fewer where the pages reserved end)
};

struct step_result {
  uint64_t step = 0;
  /// Not ok: the step failed as a whole; every sequence in it ends with `error`.
  status error;
  /// One per item with sample_last, in item order; a verify item's are
  /// consecutive: its kept drafts, then the token drawn after them.
  std::vector<sampled_token> sampled;
  /// One per item with capture_routing, in item order: its tokens' routing.
  std::vector<item_routing> routing;
  /// One per item with prompt_logprobs, in item order.
  std::vector<item_logprobs> prompt_logprobs;
  /// One per item with mtp_drafts > 0 and sample_last, in item order.
  std::vector<item_drafts> drafts;
};

/// The sampled tokens of `r` from index `from` that belong to `item` (0 when
/// it does not sample): 1, or for a verify item its kept drafts + 1, all
/// consecutive with its seq_id; -1 when they do not have that shape (too many,
/// too few, or a kept draft that is not the item's draft).
int64_t item_sampled_count(const step_item& item, const step_result& r, size_t from);
/// Whether every item's sampled tokens have item_sampled_count's shape, in
/// item order, with none left over, and the drafts are one list per item that
/// asks for them (in item order, at most mtp_drafts tokens each). The
/// scheduler CHECKs it; a remote worker's result is refused otherwise.
bool sampled_match_plan(const step_plan& plan, const step_result& r);

/// Seed of the sampler for a sequence's token number `n_generated` (from 0):
/// a mix of the sample's seed and that count, so sampling is reproducible
/// however the sequence was batched, preempted or recomputed.
uint64_t step_seed(uint64_t sample_seed, int64_t n_generated);

/// Replaces the placeholder of every feed_last_sampled item of `plan` with the
/// token `previous` (the result of the step before it) sampled for its
/// seq_id; failed_precondition, naming the sequence, when there is none (the
/// step before failed, or did not sample it).
status fill_planned_ahead(step_plan& plan, const step_result& previous);

}  // namespace hart::sched
