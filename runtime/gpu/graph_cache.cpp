#include "runtime/gpu/graph_cache.h"

#include "runtime/core/log.h"

#include <chrono>

namespace hart::gpu {

status graph_cache::run(cudaStream_t stream, uint64_t key, const std::function<status()>& body) {
  if (auto it = execs_.find(key); it != execs_.end()) {
    ++replays_;
    const cudaError_t e = cudaGraphLaunch(it->second, stream);
    if (e != cudaSuccess) return internal_error("gpu engine: graph launch: %s", cudaGetErrorString(e));
    return {};
  }
  if (refused_ || execs_.size() >= max_graphs_) return body();

  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return internal_error("gpu engine: graph capture: %s", cudaGetErrorString(e));
  const status st = body();
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess && st.ok()) e = cudaGraphInstantiate(&exec, graph, 0);
  size_t n_nodes = 0;
  if (graph) {
    cudaGraphGetNodes(graph, nullptr, &n_nodes);
    cudaGraphDestroy(graph);
  }
  if (e != cudaSuccess) {  // the capture itself failed (work the body enqueued is not capturable)
    (void)cudaGetLastError();
    refused_ = true;
    HART_LOG_WARN("gpu engine: CUDA graph capture failed (%s%s%s); decode runs without graphs from now on",
                  cudaGetErrorString(e), st.ok() ? "" : "; ", st.ok() ? "" : st.message().c_str());
    return body();
  }
  if (!st.ok()) return st;  // nothing ran: capture only records
  execs_.emplace(key, exec);
  HART_LOG_INFO("gpu engine: captured decode graph %zu (key %llx, %zu nodes) in %.1f ms", execs_.size(),
                (unsigned long long)key, n_nodes,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  e = cudaGraphLaunch(exec, stream);
  if (e != cudaSuccess) return internal_error("gpu engine: graph launch: %s", cudaGetErrorString(e));
  return {};
}

void graph_cache::clear() {
  for (auto& [key, exec] : execs_) cudaGraphExecDestroy(exec);
  execs_.clear();
}

}  // namespace hart::gpu
