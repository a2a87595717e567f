// File: runtime/worker/mtp_drafting.h
// The MTP block's part of a step (docs/spec-decode.md §6.3), after the pass,
// acceptance and rollback: for every item with mtp_kv, the block's window KV
// of the positions the item kept (position t is fed the main model's last
// streams at t and the token at t + 1, so it can run once that token is
// known: the item's own next token, the token it emitted, or the plan's
// next_token), and for every item with mtp_drafts, the next step's drafts:
// the argmax of the block at the last kept position, then chained (the block
// fed its own streams and its last draft) into positions past it, as far as
// the pages the item holds reach. Those chained positions' KV is provisional:
// the next step's catch-up rewrites it from the main model's streams.
#pragma once

#include "runtime/model/forward_engine.h"
#include "runtime/sched/step.h"

#include <cstdint>
#include <vector>

namespace hart::worker {

/// `streams` [D, n_hc, rows]: forward_trace::last_streams of the pass (rows in
/// item order); `emitted` per item (sample_step_items), its tokens in
/// res->sampled. Appends to res->drafts.
status mtp_catch_up(const forward_engine& eng, const sched::step_plan& plan,
                    std::vector<sequence_state>& seqs, const std::vector<float>& streams,
                    const std::vector<int64_t>& emitted, sched::step_result* res);

}  // namespace hart::worker
