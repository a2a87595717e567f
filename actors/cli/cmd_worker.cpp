// `hart worker`: one engine as a separate process. Connects a DEALER to a
// scheduler's worker endpoint (runtime/worker_link), says hello with its model
// summary, sizes its kv_store from the server's configure reply, then loops:
// step_plan in -> cpu_worker::execute -> step_result out. Exits on the
// server's bye; `hart serve --worker-process` also kills it when it dies
// (PR_SET_PDEATHSIG, set when spawning).
#include <unistd.h>

#include <cstdio>
#include <zmq.hpp>

#include "actors/cli/cli_common.h"
#include "runtime/core/log.h"
#include "runtime/worker/cpu_worker.h"
#include "runtime/worker_link/step_codec.h"

namespace hart::cli {
namespace {

bool send_msg(zmq::socket_t& s, const worker_link::worker_message& m) {
  auto f = worker_link::encode(m);
  if (!f.ok()) {
    HART_LOG_ERROR("%s", f.get_status().to_string().c_str());
    return false;
  }
  try {
    return bool(s.send(zmq::buffer(*f), zmq::send_flags::none));
  } catch (const zmq::error_t& e) {
    HART_LOG_ERROR("send: %s", e.what());
    return false;
  }
}

}  // namespace

worker_link::model_summary model_summary_of(const engine& eng, const common_options& o) {
  worker_link::model_summary m;
  m.vocab_size = eng.config().vocab_size;
  m.hidden_size = eng.config().hidden_size;
  m.n_layers = eng.config().n_layers;
  m.window = eng.config().window;
  m.precision = o.precision_name;
  m.deterministic = o.deterministic;
  return m;
}

int run_worker(const worker_options& o) {
  auto eng = load_engine(o.common);
  if (!eng.ok()) return fail(eng.get_status());
  if (!o.pid_file.empty()) {
    if (FILE* f = std::fopen(o.pid_file.c_str(), "w")) {
      std::fprintf(f, "%d\n", int(getpid()));
      std::fclose(f);
    }
  }
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(worker_link::max_frame_bytes + 64));
  try {
    sock.connect(o.connect);
  } catch (const zmq::error_t& e) {
    return fail(invalid_argument("worker: cannot connect to %s: %s", o.connect.c_str(), e.what()));
  }
  worker_link::worker_hello hello;
  hello.pid = getpid();
  hello.model = model_summary_of(**eng, o.common);
  if (!send_msg(sock, hello)) return 1;

  std::unique_ptr<kv_store> store;
  std::unique_ptr<sched::cpu_worker> worker;
  for (;;) {
    zmq::message_t msg;
    try {
      if (!sock.recv(msg)) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      HART_LOG_ERROR("recv: %s", e.what());
      return 1;
    }
    auto m = worker_link::decode(msg.data(), msg.size());
    if (!m.ok()) return fail(m.get_status());  // the server notices the exit and respawns
    if (auto* c = std::get_if<worker_link::worker_configure>(&m.value())) {
      auto s = (*eng)->make_store(c->page_size);
      if (!s.ok()) return fail(s.get_status());
      store = std::move(s).value();
      store->ensure_full_pages(c->n_full_pages);
      store->ensure_swa_pages(c->n_swa_pages);
      worker = std::make_unique<sched::cpu_worker>(**eng, *store);
      HART_LOG_INFO("worker %d: %lld-token pages, %lld full, %lld swa", int(getpid()), (long long)c->page_size,
                    (long long)c->n_full_pages, (long long)c->n_swa_pages);
    } else if (auto* p = std::get_if<sched::step_plan>(&m.value())) {
      sched::step_result r;
      if (!worker) {
        r.step = p->step;
        r.error = failed_precondition("worker: step before configure");
      } else {
        r = worker->execute(*p);
      }
      if (!send_msg(sock, r)) return 1;
    } else if (std::holds_alternative<worker_link::worker_bye>(m.value())) {
      HART_LOG_INFO("worker %d: the server said bye", int(getpid()));
      return 0;
    }
  }
}

}  // namespace hart::cli
