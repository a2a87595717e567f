#include "actors/serving_system.h"

#include "actors/scheduler_actor.h"
#include "actors/weight_sync_actor.h"

#include <functional>
#include <mutex>
#include <vector>

namespace hart::actors {

struct serving_system::parts {
  std::unique_ptr<http::http_server> http_srv;
  std::shared_ptr<transport::server> srv;
  std::shared_ptr<weight_sync::sync_server> sync_srv;
  std::vector<std::function<void()>> clear_slots;
  std::vector<caf::actor> actors;  // in spawn order

  // Sockets, then the slots that hand their messages to actors, then the actors, newest first.
  ~parts() {
    if (http_srv) http_srv->stop();
    if (srv) srv->stop();
    if (sync_srv) sync_srv->stop();
    for (const auto& clear : clear_slots) clear();
    for (auto a = actors.rbegin(); a != actors.rend(); ++a)
      caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  }
};

namespace {

// Where a socket thread posts: the actor exists only after the socket (it needs the socket to
// reply), and goes before it at shutdown.
template <class Actor>
struct actor_slot {
  std::mutex m;
  Actor actor;
};

}  // namespace

serving_system::serving_system(std::unique_ptr<parts> p) : p_(std::move(p)) {}

serving_system::~serving_system() = default;

std::string serving_system::endpoint() const {
  return p_->srv ? p_->srv->endpoint() : std::string();
}
std::string serving_system::weight_sync_endpoint() const {
  return p_->sync_srv ? p_->sync_srv->endpoint() : std::string();
}
std::string serving_system::http_endpoint() const {
  return p_->http_srv ? p_->http_srv->endpoint() : std::string();
}

status_or<std::unique_ptr<serving_system>> serving_system::start(caf::actor_system& sys,
                                                                 serving_system_params prm) {
  auto p = std::make_unique<parts>();
  HART_ASSIGN_OR_RETURN(worker_actor worker, spawn_worker_actor(sys, prm.worker));
  p->actors.push_back(caf::actor_cast<caf::actor>(worker));
  scheduler_actor_params sap;
  sap.serving = prm.serving;
  sap.tok = prm.tok;
  sap.worker = worker;
  sap.weight_version = prm.worker.weights ? prm.worker.weights->version() : 0;
  sap.started = prm.started;
  sap.overlap = prm.overlap;
  sap.catch_step = prm.catch_step;
  sap.prefill_endpoint = prm.prefill_endpoint;
  sap.prefill_timeout_ms = prm.prefill_timeout_ms;
  sap.kv_layout = prm.kv_layout;
  HART_ASSIGN_OR_RETURN(scheduler_actor scheduler, spawn_scheduler_actor(sys, sap));
  p->actors.push_back(caf::actor_cast<caf::actor>(scheduler));

  // The message API: its socket thread hands requests to the gateway.
  auto slot = std::make_shared<actor_slot<gateway_actor>>();
  auto to_gateway = [slot](const transport::client_id& client, protocol::request r, bool from_server) {
    std::lock_guard<std::mutex> lock(slot->m);
    if (slot->actor) {
      caf::anon_send(slot->actor, inbound_atom::value,
                     std::make_shared<const inbound_request>(
                         inbound_request{client, std::move(r), nullptr, from_server}));
    }
  };
  // A slow reader's generations are aborted as its own "abort all" would (no ack): they stop
  // using the engine and their pages, and each ends with a final the client gets once it reads.
  auto on_slow_client = [to_gateway](const transport::client_id& client) {
    protocol::control_request abort_all;
    abort_all.verb = protocol::control_verb::abort;
    abort_all.all = true;
    to_gateway(client, protocol::request{abort_all}, true);
  };
  // A client whose connection closed reads nothing any more: its generations are aborted the
  // same way, so they stop using the engine and their pages now, not at their last token.
  auto on_disconnect = on_slow_client;
  HART_ASSIGN_OR_RETURN(p->srv, transport::server::start(
                                    prm.message_api,
                                    [to_gateway](const transport::client_id& client, protocol::request r) {
                                      to_gateway(client, std::move(r), false);
                                    },
                                    on_slow_client, on_disconnect));
  p->clear_slots.push_back([slot] {
    std::lock_guard<std::mutex> lock(slot->m);
    slot->actor = gateway_actor{};
  });
  gateway_params gp = prm.gateway;
  gp.server = p->srv;
  gp.scheduler = scheduler;
  gp.tok = prm.tok;
  const gateway_actor gateway = spawn_gateway_actor(sys, gp);
  p->actors.push_back(caf::actor_cast<caf::actor>(gateway));
  caf::anon_send(scheduler, gateway);
  {
    std::lock_guard<std::mutex> lock(slot->m);
    slot->actor = gateway;
  }

  // Weight sync: its own socket thread hands decoded messages to the weight-sync actor.
  auto wslot = std::make_shared<actor_slot<weight_sync_actor>>();
  if (!prm.weight_sync.endpoint.empty()) {
    HART_ASSIGN_OR_RETURN(p->sync_srv,
                          weight_sync::sync_server::start(
                              prm.weight_sync, [wslot](std::shared_ptr<const weight_sync::inbound_sync> m) {
                                std::lock_guard<std::mutex> lock(wslot->m);
                                if (wslot->actor)
                                  caf::anon_send(wslot->actor, sync_atom::value, std::move(m));
                              }));
  }
  // The weight-sync actor runs pushes from the sync socket and the HTTP weight endpoints' updates.
  weight_sync_actor sync_actor;
  if (prm.worker.weights && (p->sync_srv || prm.http)) {
    p->clear_slots.push_back([wslot] {
      std::lock_guard<std::mutex> lock(wslot->m);
      wslot->actor = weight_sync_actor{};
    });
    weight_sync_actor_params ap;
    ap.target = prm.worker.weights;  // the serving engine, CPU or GPU (never a worker process)
    ap.engine_actor = scheduler;     // swaps at the scheduler's step boundary, on the worker
    ap.server = p->sync_srv;
    ap.serving_config = prm.cfg;
    ap.idle_timeout = prm.weight_sync_idle;
    sync_actor = spawn_weight_sync_actor(sys, ap);
    p->actors.push_back(caf::actor_cast<caf::actor>(sync_actor));
    std::lock_guard<std::mutex> lock(wslot->m);
    wslot->actor = sync_actor;
  }

  // HTTP: its threads post to the gateway like the socket thread (never blocking on an actor).
  if (prm.http) {
    auto to_gateway_http = [slot](const std::string& client, protocol::request r,
                                  std::shared_ptr<http::reply_queue> q) {
      std::lock_guard<std::mutex> lock(slot->m);
      if (slot->actor) {
        caf::anon_send(
            slot->actor, inbound_atom::value,
            std::make_shared<const inbound_request>(inbound_request{client, std::move(r), std::move(q)}));
      }
    };
    http::weights_fn to_weight_sync;
    if (sync_actor) {
      to_weight_sync = [wslot](const http::weights_update& u, std::function<void(status, uint64_t)> done) {
        auto m = std::make_shared<local_update>();
        m->checkpoint_dir = u.checkpoint_dir;
        m->version = u.version;
        m->done = [done](const swap_outcome& o) { done(o.result, o.serving_version); };
        std::lock_guard<std::mutex> lock(wslot->m);
        if (wslot->actor) {
          caf::anon_send(wslot->actor, local_update_atom::value, std::shared_ptr<const local_update>(m));
        } else {
          done(unavailable("the server is shutting down"), 0);
        }
      };
    }
    HART_ASSIGN_OR_RETURN(p->http_srv, http::http_server::start(*prm.http, to_gateway_http, to_weight_sync));
  }
  return std::unique_ptr<serving_system>(new serving_system(std::move(p)));
}

}  // namespace hart::actors
