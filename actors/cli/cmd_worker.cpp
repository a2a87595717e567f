// `hart worker`: one engine as a separate process. Connects a DEALER to a
// scheduler's worker endpoint (runtime/worker_link), says hello with its model
// summary, sizes its KV pages from the server's configure reply (the CPU
// engine's kv_store, or with --device cuda the GPU engine, loaded then with a
// pool of exactly those pages), then loops: step_plan in -> execute ->
// step_result out. The engine runs on its own thread (executor creation and
// every step, so the CUDA device is the same thread's throughout) while the
// main thread owns the socket and sends a heartbeat every configured period
// until the step's result is ready. Exits on the server's bye; `hart serve
// --worker-process` also kills it when it dies (PR_SET_PDEATHSIG, set when
// spawning).
#include <unistd.h>

#include <cstdlib>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "actors/cli/cli_common.h"
#include "actors/cli/device_executor.h"
#include "runtime/core/log.h"
#include "runtime/worker/local_executor.h"
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

// Runs jobs one at a time, in order, on one thread (the engine's).
class engine_thread {
 public:
  engine_thread() : thread_([this] { loop(); }) {}
  ~engine_thread() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  template <class F>
  auto run(F f) -> std::future<decltype(f())> {
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> l(m_);
      jobs_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace

worker_link::model_summary model_summary_of(const model_config& cfg, const common_options& o) {
  worker_link::model_summary m;
  m.vocab_size = cfg.vocab_size;
  m.hidden_size = cfg.hidden_size;
  m.n_layers = cfg.n_layers;
  m.window = cfg.window;
  m.precision = o.precision_name;
  m.deterministic = o.deterministic;
  return m;
}

int run_worker(const worker_options& o) {
  if (status st = device_usable(o.common.device); !st.ok()) return fail(st);
  const bool gpu = o.common.device == "cuda";
  // The CPU engine loads now; the GPU engine at configure, when its pool size is known.
  std::unique_ptr<engine> eng;
  model_config cfg;
  if (gpu) {
    auto c = model_config_load(o.common.model_dir);
    if (!c.ok()) return fail(c.get_status());
    cfg = std::move(c).value();
  } else {
    auto e = load_engine(o.common);
    if (!e.ok()) return fail(e.get_status());
    eng = std::move(e).value();
    cfg = eng->config();
  }
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
  hello.model = model_summary_of(cfg, o.common);
  if (const char* t = std::getenv("HART_WORKER_TOKEN")) {  // from the server that spawned this process
    hello.token = t;
    unsetenv("HART_WORKER_TOKEN");
  }
  if (!send_msg(sock, hello)) return 1;

  std::unique_ptr<sched::step_executor> worker;
  int64_t heartbeat_ms = 0;
  engine_thread engine_thread;  // destroyed first: no job outlives `worker`
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
      cache::cache_config pages;
      pages.page_size = c->page_size;
      pages.n_full_pages = c->n_full_pages;
      pages.n_swa_pages = c->n_swa_pages;
      heartbeat_ms = c->heartbeat_ms;
      const status made = engine_thread.run([&]() -> status {
        if (gpu) {
          gpu_serving_sizes sizes;  // the server's pages, as they are
          sizes.max_context = gpu_max_context(cfg, o.max_context);
          sizes.memory_fraction = 0;
          auto ex = make_gpu_executor(o.common, &pages, sizes);
          if (!ex.ok()) return ex.get_status();
          worker = std::move(ex).value();
        } else {
          auto ex = sched::local_executor::create(*eng, pages);
          if (!ex.ok()) return ex.get_status();
          worker = std::move(ex).value();
        }
        return {};
      }).get();
      if (!made.ok()) return fail(made);  // the server sees the worker exit
      HART_LOG_INFO("worker %d: %lld-token pages, %lld full, %lld swa", int(getpid()), (long long)c->page_size,
                    (long long)c->n_full_pages, (long long)c->n_swa_pages);
    } else if (auto* p = std::get_if<sched::step_plan>(&m.value())) {
      sched::step_result r;
      if (!worker) {
        r.step = p->step;
        r.error = failed_precondition("worker: step before configure");
      } else {
        auto pending = engine_thread.run([&] { return worker->execute(*p); });
        while (heartbeat_ms > 0 &&
               pending.wait_for(std::chrono::milliseconds(heartbeat_ms)) == std::future_status::timeout) {
          if (!send_msg(sock, worker_link::worker_heartbeat{p->step})) {
            pending.wait();  // the job reads *p
            return 1;
          }
        }
        if (status_or<sched::step_result> res = pending.get(); res.ok()) {
          r = std::move(res).value();
        } else {
          r.step = p->step;
          r.error = res.get_status();
        }
      }
      if (!send_msg(sock, r)) return 1;
    } else if (std::holds_alternative<worker_link::worker_bye>(m.value())) {
      HART_LOG_INFO("worker %d: the server said bye", int(getpid()));
      return 0;
    }
  }
}

}  // namespace hart::cli
