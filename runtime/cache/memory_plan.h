// File: runtime/cache/memory_plan.h
// How one device's memory is split when the KV pools are sized from a
// fraction of it (`hart serve --device cuda --gpu-memory-fraction 0.9`,
// SGLang's mem_fraction_static): everything hart and others hold on the
// device counts against `fraction × total`; what is left of it after the
// weights and every workspace becomes KV pages. The rest of the device,
// (1 − fraction) × total, stays free for what is allocated lazily (CUDA graph
// pools, cuBLAS, NCCL). A configuration that cannot run is refused here, at
// startup, with the numbers: never an out-of-memory error at step 10,000.
//
// The GPU engine measures its inputs (weights and workspaces allocated,
// cudaMemGetInfo after); `hart cache-plan` predicts them without a device.
//
//   memory_plan_params p;
//   p.device_total = total; p.device_free = free;          // after weights + workspaces
//   p.weights = w.bytes; p.workspaces = arena + linear contexts;
//   p.full_page_bytes = pool_full; p.swa_page_bytes = pool_swa; ...
//   HART_ASSIGN_OR_RETURN(memory_plan plan, memory_plan_make(p));
//   // plan.n_full_pages, plan.n_swa_pages -> the KV pool and the cache shard
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <string>

namespace hart::cache {

struct memory_plan_params {
  int64_t device_total = 0;  // bytes of device memory
  int64_t device_free = 0;   // free now, with the weights and workspaces already allocated
  double fraction = 0.9;     // of device_total that may be in use once the KV pool is allocated
  // What is already allocated (reported, and for the refusal's message).
  int64_t weights = 0;
  int64_t workspaces = 0;  // activation arena, linear contexts, staging: every per-pass buffer
  // The KV pools.
  int64_t full_page_bytes = 0;
  int64_t swa_page_bytes = 0;
  int64_t page_size = 256;
  int64_t window = 128;
  // What must run: one sequence of max_context beside max_running sequences'
  // windows, with a prefill pass of max_batch_tokens tokens.
  int64_t max_context = 0;
  int64_t max_running = 1;
  int64_t max_batch_tokens = 0;
  // > 0: these page counts instead of the budget's (checked against it).
  int64_t n_full_pages = 0;
  int64_t n_swa_pages = 0;

  status validate() const;
};

struct memory_plan {
  memory_plan_params in;
  int64_t budget = 0;              // fraction × total
  int64_t others = 0;              // in use and not weights or workspaces: CUDA context, other processes
  int64_t kv_budget = 0;           // budget − everything in use: what the KV pages may take
  int64_t full_pages_per_seq = 0;  // ceil(max_context / P)
  int64_t swa_pages_per_seq =
      0;  // cache_config::min_swa_pages(); n_swa_pages = max_running of them + one pass's chunk
  int64_t n_full_pages = 0;
  int64_t n_swa_pages = 0;
  int64_t kv_bytes = 0;             // the pages chosen
  int64_t seqs_at_max_context = 0;  // n_full_pages / full_pages_per_seq
  int64_t token_capacity = 0;       // n_full_pages × P: positions the full pages hold in all

  /// One line per item, sizes in GiB: what `hart cache-plan` prints and the engine logs.
  std::string describe() const;
};

/// invalid_argument for bad params; resource_exhausted, naming every number,
/// when the weights and workspaces leave no KV budget, when one sequence of
/// max_context does not fit beside the running sequences' SWA pages, or when
/// given page counts exceed the budget.
status_or<memory_plan> memory_plan_make(const memory_plan_params& p);

}  // namespace hart::cache
