#include "runtime/worker/step_routing.h"

namespace hart::worker {

bool plan_captures_routing(const sched::step_plan& plan) {
  for (const sched::step_item& it : plan.items) {
    if (it.capture_routing) return true;
  }
  return false;
}

void collect_step_routing(const sched::step_plan& plan, const forward_trace& trace, sched::step_result* res) {
  const int64_t n_tokens = plan.n_tokens();
  int64_t row = 0;
  for (const sched::step_item& it : plan.items) {
    const int64_t n = int64_t(it.tokens.size());
    if (it.capture_routing) {
      res->routing.push_back(
          {it.seq_id, sched::routing_trace::slice(trace.experts, trace.topk, n_tokens, row, n)});
    }
    row += n;
  }
}

}  // namespace hart::worker
