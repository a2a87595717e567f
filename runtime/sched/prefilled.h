// File: runtime/sched/prefilled.h
// A sequence whose prompt was computed elsewhere (a prefill server, docs/pd.md)
// and whose KV is already in the pages its cache request holds: what
// scheduler::admit_prefilled needs to run it from its first sampled token on.
//
//   prefilled p{cache_id, n_cached, full, swa, first, arrival_us};
//   event_batch ev = sched.admit_prefilled(std::move(req), p);   // the first token's event
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/sched/step.h"

#include <cstdint>
#include <vector>

namespace hart::sched {

struct prefilled {
  cache::request_id cache_id = -1;   // admitted for the prompt, pages for [0, prompt + 1) reserved
  int64_t n_cached = 0;              // of the prompt, positions the cache held before the import
  std::vector<cache::page_id> full;  // its page tables (request_pages)
  std::vector<cache::page_id> swa;
  sampled_token first;     // sampled from the prompt's last logits (seq_id unused)
  int64_t arrival_us = 0;  // when the request arrived (the scheduler's clock): TTFT counts from it
};

/// Whether r can be served with its prompt computed elsewhere: unimplemented
/// for what the hand-off does not carry (n > 1 samples, routing, prompt
/// log-probs, max_new_tokens 0).
status prefilled_supported(const gen_request& r);

}  // namespace hart::sched
