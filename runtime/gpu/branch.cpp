// The side stream of small passes (gpu_engine_impl.h, branch_run): a fork is
// an event the side waits for, a join one the main stream waits for; under a
// graph capture the same calls record the branch's edges.
#include "runtime/gpu/gpu_engine_impl.h"

#include <utility>

namespace hart::gpu {
namespace {

// Points s.stream, s.lin and the arena's QDQ buffer at the side's, and back.
class on_side {
 public:
  explicit on_side(engine_state& s) : s_(s) { swap(); }
  ~on_side() { swap(); }
  on_side(const on_side&) = delete;
  on_side& operator=(const on_side&) = delete;

 private:
  void swap() {
    std::swap(s_.stream, s_.side);
    std::swap(s_.lin, s_.side_lin);
    std::swap(s_.a.qdq, s_.a.side_qdq);
  }
  engine_state& s_;
};

}  // namespace

status branch_run(engine_state& s, int64_t T, const std::function<status()>& fn) {
  if (T > k_branch_tokens || !s.side) return fn();
  HART_RETURN_IF_ERROR(cuda_status(cudaEventRecord(s.fork_event, s.stream), "gpu engine: branch"));
  HART_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(s.side, s.fork_event, 0), "gpu engine: branch"));
  s.side_pending = true;
  on_side scope(s);
  return fn();
}

status branch_join(engine_state& s) {
  if (!s.side_pending) return {};
  s.side_pending = false;
  HART_RETURN_IF_ERROR(cuda_status(cudaEventRecord(s.join_event, s.side), "gpu engine: branch"));
  return cuda_status(cudaStreamWaitEvent(s.stream, s.join_event, 0), "gpu engine: branch");
}

}  // namespace hart::gpu
