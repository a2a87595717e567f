// File: actors/serving_system.h
// The actors of `hart serve` wired together, as one object: the worker actor
// (with the executor its params make), the scheduler actor, the message API
// (a ZeroMQ socket whose thread hands requests to the gateway actor), weight
// sync (its socket and actor, when asked for or when HTTP may update weights)
// and the HTTP front door. start() brings them up in dependency order; the
// destructor, or a failure half way, stops them in reverse: sockets first, then
// the slots that hand their messages to actors, then the actors, newest first
// (the actor system's destructor waits for every actor, so one left running
// would hang the process). The command line (cli/cmd_serve.cpp) reads
// options, loads the model and signals; this file is the wiring.
//
//   caf::actor_system sys{cfg};
//   HART_ASSIGN_OR_RETURN(auto serving, actors::serving_system::start(sys, std::move(params)));
//   std::printf("hart: serving on %s\n", serving->endpoint().c_str());
//   // ... until a signal; `serving` goes before `sys`.
#pragma once

#include "actors/gateway_actor.h"
#include "actors/worker_actor.h"
#include "runtime/http/http_server.h"
#include "runtime/model/config.h"
#include "runtime/sched/scheduler.h"
#include "runtime/transport/server.h"
#include "runtime/weight_sync/sync_server.h"

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace hart::actors {

struct serving_system_params {
  sched::serving_params serving;
  model_config cfg;
  const tokenizer* tok = nullptr;  // may be null: token-id prompts only; outlives the system
  worker_actor_params worker;
  // The scheduler actor (scheduler_actor.h).
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  bool overlap = false;
  std::chrono::microseconds catch_step{0};
  /// `--role decode`: prompts are computed by this prefill server (docs/pd.md); empty: here.
  std::string prefill_endpoint;
  int64_t prefill_timeout_ms = 30000;
  uint64_t kv_layout = 0;  // the worker's kv_store::layout_id
  // The message API; the gateway's limits (its server and scheduler are filled in here).
  transport::server_params message_api;
  gateway_params gateway;
  // Weight sync: the socket when weight_sync.endpoint is set; the actor whenever the worker
  // has weights to swap and there is a socket or HTTP.
  weight_sync::sync_server_params weight_sync;
  std::chrono::milliseconds weight_sync_idle{60000};
  // HTTP when set (http_params complete, server_args included).
  std::optional<http::http_params> http;
};

class serving_system {
 public:
  /// The errors of each part's start (a port in use, a bad key, an executor that cannot be
  /// made); whatever had started is stopped again before it returns.
  static status_or<std::unique_ptr<serving_system>> start(caf::actor_system& sys,
                                                          serving_system_params params);
  ~serving_system();
  serving_system(const serving_system&) = delete;
  serving_system& operator=(const serving_system&) = delete;

  /// The bound endpoints with their ports; empty where the part is off.
  std::string endpoint() const;
  std::string weight_sync_endpoint() const;
  std::string http_endpoint() const;

  struct parts;

 private:
  explicit serving_system(std::unique_ptr<parts> p);
  std::unique_ptr<parts> p_;
};

}  // namespace hart::actors
