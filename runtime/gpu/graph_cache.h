// File: runtime/gpu/graph_cache.h
// Decode steps as CUDA graphs: one executable graph per shape key, captured
// the first time that shape runs and replayed after. The body must enqueue
// only stream work on fixed device addresses: no host waits, no copies from
// host memory (its inputs are copied in before the replay, its outputs read
// after). A capture the runtime refuses turns graphs off (logged once) and
// the body runs as it is; a full cache runs new shapes as they are.
//
//   graph_cache graphs;
//   HART_RETURN_IF_ERROR(graphs.run(stream, key, [&] { return enqueue_step(); }));
#pragma once

#include "runtime/core/status.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

namespace hart::gpu {

class graph_cache {
 public:
  explicit graph_cache(size_t max_graphs = 512) : max_graphs_(max_graphs) {}
  ~graph_cache() { clear(); }
  graph_cache(const graph_cache&) = delete;
  graph_cache& operator=(const graph_cache&) = delete;

  /// Enqueues body's work on `stream`: replays key's graph, else captures body
  /// into a new one and launches it (else runs body). body's error is returned.
  status run(cudaStream_t stream, uint64_t key, const std::function<status()>& body);
  /// Drops every graph: the addresses they captured changed (a weight swap).
  void clear();
  size_t size() const { return execs_.size(); }
  uint64_t replays() const { return replays_; }

 private:
  size_t max_graphs_;
  bool refused_ = false;  // a capture failed: run bodies directly from then on
  uint64_t replays_ = 0;
  std::unordered_map<uint64_t, cudaGraphExec_t> execs_;
};

}  // namespace hart::gpu
