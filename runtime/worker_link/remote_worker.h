// File: runtime/worker_link/remote_worker.h
// The scheduler side of one `hart worker` process: a ZeroMQ ROUTER bound on
// loopback (tcp://127.0.0.1:* by default), a worker's hello answered with a
// configure (page size and pool sizes for its kv_store), then one step_plan
// out and its step_result back per execute(). A step_executor.
//
// A dead worker is noticed by: the child process exiting (when this object
// spawned it: waitpid WNOHANG while waiting), a bye from the worker, a send
// the ROUTER cannot route (router_mandatory), silence during a step longer
// than heartbeat_timeout_ms (a live worker sends a heartbeat every quarter of
// it while it computes: a frozen or wedged process, spawned or not, is told
// from a slow step), or the step timeout. execute()
// then returns unavailable naming the failure; the child is killed and
// reaped, and the next execute() spawns a new one (with `spawn_argv`, at most
// `max_restarts` times) or waits for any worker to connect. Between steps,
// check_idle() (called by the idle worker actor every idle_check_ms) notices
// a worker that died idle the same ways but the timeout, and replaces it at
// once. Not thread-safe; one plan in flight.
//
//   remote_worker_params p;  p.config = {128, 256, 64};  p.expect = summary;
//   p.spawn_argv = {"/proc/self/exe", "worker", "--model", dir};  // --connect EP is appended
//   HART_ASSIGN_OR_RETURN(auto rw, remote_worker::start(p));       // binds, spawns, waits for hello
//   status_or<sched::step_result> r = rw->execute(plan);
#pragma once

#include "runtime/sched/step_executor.h"
#include "runtime/worker_link/step_codec.h"

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hart::worker_link {

struct remote_worker_params {
  std::string endpoint = "tcp://127.0.0.1:*";
  worker_configure config;  // sent to every worker that says hello
  model_summary expect;     // a worker serving another model is refused
  /// Empty: wait for workers started elsewhere. Else the command to spawn
  /// (argv[0] is the executable path); "--connect <endpoint>" is appended.
  std::vector<std::string> spawn_argv;
  int64_t hello_timeout_ms = 120000;  // a worker loads its engine before hello
  int64_t step_timeout_ms = 600000;
  /// A step with no word from the worker for this long fails (0: off); the
  /// worker is configured to send a heartbeat every quarter of it.
  int64_t heartbeat_timeout_ms = 10000;
  int64_t poll_ms = 50;  // how often a waiting execute checks the child
  /// How often an idle worker actor asks check_idle() (0: never).
  int64_t idle_check_ms = 200;
  /// Spawned workers that died are replaced at most this often (-1 = always);
  /// past it, execute() fails at once with unavailable.
  int64_t max_restarts = -1;
  /// A hello must carry this token (worker_hello::token) to be answered; empty: any hello (a
  /// loopback endpoint). A spawned worker gets a fresh random token instead, in its
  /// environment (HART_WORKER_TOKEN, not argv), so no other local process can take its place.
  std::string token;
  /// Called with each spawned child's pid (e.g. to log it).
  std::function<void(int64_t pid)> on_spawn;
};

class remote_worker : public sched::step_executor {
 public:
  /// Binds, and when spawning, starts the first worker and waits for its hello.
  static status_or<std::unique_ptr<remote_worker>> start(remote_worker_params params);
  ~remote_worker() override;  // sends bye, then reaps (kills after 2 s) the child

  status_or<sched::step_result> execute(const sched::step_plan& plan) override;
  bool keeps_pages_on_failure() const override { return false; }
  int64_t idle_check_ms() const override;
  /// Between steps: handles what the worker sent (a hello, a bye) and reaps a
  /// spawned child that exited. When the worker is gone, starts the next one
  /// when spawning (as execute() would; a failure is logged and left to
  /// execute()) and returns true: its pages are empty.
  bool check_idle(std::string* why) override;

  /// Waits (up to hello_timeout_ms) until a configured worker is connected,
  /// spawning one first if needed.
  status ensure_worker();

  /// The bound endpoint workers connect to (resolved port).
  const std::string& endpoint() const;
  /// The connected worker's pid (from its hello); 0 when none.
  int64_t worker_pid() const;
  int64_t n_spawned() const;

 private:
  struct impl;
  explicit remote_worker(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace hart::worker_link
