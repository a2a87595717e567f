// File: runtime/worker_link/worker_process.h
// The worker side of the link (remote_worker.h is the scheduler's): what a
// `hart worker` process runs once its model is loaded. Connects a DEALER to
// the server's worker endpoint, says hello, makes its executor from the
// server's configure (the page counts its KV must have) and then loops:
// step_plan in -> execute -> step_result out. The executor is made and every
// step runs on one engine thread (a CUDA device stays the same thread's
// throughout) while this thread owns the socket and sends a heartbeat every
// configured period until the step's result is ready.
//
//   worker_process_params p;
//   p.connect = "tcp://127.0.0.1:5560";  p.hello = {pid, summary, token};
//   p.make_executor = [&](const cache::cache_config& pages) { return engine_executor::on_cpu(eng, pages); };
//   HART_RETURN_IF_ERROR(worker_process_run(p));   // ok once the server says bye
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/sched/step_executor.h"
#include "runtime/worker_link/step_codec.h"

#include <functional>
#include <memory>
#include <string>

namespace hart::worker_link {

struct worker_process_params {
  std::string connect;  // the server's worker endpoint
  worker_hello hello;   // sent first: pid, model summary, the spawn token
  /// Called on the engine thread with the configure's pages (each configure makes a new one).
  std::function<status_or<std::unique_ptr<sched::step_executor>>(const cache::cache_config& pages)>
      make_executor;
};

/// Ok when the server says bye. Errors (the server sees the process exit and replaces it): a
/// bad endpoint, a frame that does not decode, an executor that cannot be made, a send that
/// fails. A step before any configure is answered with a failed_precondition result.
status worker_process_run(const worker_process_params& params);

}  // namespace hart::worker_link
