// File: runtime/sched/routing_trace.h
// The routing a request can ask to get back for replay in training
// (gen_request::return_routing): per MoE layer the routed experts, per CSA
// layer the indexer's top-k compressed entries, at every position the model
// computed for the sample, position-major. A trainer that recomputes
// log-probs with these decisions forced sees the rollout's sparse choices,
// not ones re-derived from its own (slightly different) activations.
//
//   routing_trace t;  t.positions = n;  t.experts = {{layer, k, ids}, ...};
//   t.write(part, at);  // a step's rows for positions at .. at + part.positions
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace hart::sched {

struct layer_routing {
  int32_t layer = 0;
  int32_t k = 0;             // ids per position
  std::vector<int32_t> ids;  // [positions, k]; -1 = no entry (an indexer list shorter than k)
};

struct routing_trace {
  int64_t positions = 0;
  std::vector<layer_routing> experts;  // one per MoE layer, by layer
  std::vector<layer_routing> picks;    // one per CSA layer, by layer

  /// The rows of tokens [row0, row0 + n) of a forward call's trace maps
  /// (layer → [k, T] position-major, as forward_trace holds them).
  static routing_trace slice(const std::map<int64_t, std::vector<int32_t>>& experts,
                             const std::map<int64_t, std::vector<int32_t>>& picks, int64_t n_call_tokens,
                             int64_t row0, int64_t n);
  /// Writes `part` at positions [at, at + part.positions), growing this trace
  /// (a recomputation after preemption writes the same positions again).
  void write(const routing_trace& part, int64_t at);
  /// Keeps positions [0, n).
  void truncate(int64_t n);
};

}  // namespace hart::sched
