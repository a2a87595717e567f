#include "runtime/worker_link/worker_process.h"

#include "runtime/core/log.h"

#include <zmq.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace hart::worker_link {
namespace {

status send_msg(zmq::socket_t& s, const worker_message& m) {
  HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, encode(m));
  try {
    if (!s.send(zmq::buffer(frame), zmq::send_flags::none)) return unavailable("worker: send would block");
    return {};
  } catch (const zmq::error_t& e) {
    return unavailable("worker: send: %s", e.what());
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

status worker_process_run(const worker_process_params& p) {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_bytes + 64));
  try {
    sock.connect(p.connect);
  } catch (const zmq::error_t& e) {
    return invalid_argument("worker: cannot connect to %s: %s", p.connect.c_str(), e.what());
  }
  HART_RETURN_IF_ERROR(send_msg(sock, p.hello));

  std::unique_ptr<sched::step_executor> worker;
  int64_t heartbeat_ms = 0;
  engine_thread engine;  // destroyed first: no job outlives `worker`
  for (;;) {
    zmq::message_t msg;
    try {
      if (!sock.recv(msg)) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return unavailable("worker: recv: %s", e.what());
    }
    HART_ASSIGN_OR_RETURN(worker_message m, decode(msg.data(), msg.size()));
    if (auto* c = std::get_if<worker_configure>(&m)) {
      cache::cache_config pages;
      pages.page_size = c->page_size;
      pages.n_full_pages = c->n_full_pages;
      pages.n_swa_pages = c->n_swa_pages;
      heartbeat_ms = c->heartbeat_ms;
      HART_RETURN_IF_ERROR(engine
                               .run([&]() -> status {
                                 HART_ASSIGN_OR_RETURN(worker, p.make_executor(pages));
                                 return {};
                               })
                               .get());
      HART_LOG_INFO("worker %lld: %lld-token pages, %lld full, %lld swa", (long long)p.hello.pid,
                    (long long)c->page_size, (long long)c->n_full_pages, (long long)c->n_swa_pages);
    } else if (auto* plan = std::get_if<sched::step_plan>(&m)) {
      sched::step_result r;
      if (!worker) {
        r.step = plan->step;
        r.error = failed_precondition("worker: step before configure");
      } else {
        auto pending = engine.run([&] { return worker->execute(*plan); });
        while (heartbeat_ms > 0 &&
               pending.wait_for(std::chrono::milliseconds(heartbeat_ms)) == std::future_status::timeout) {
          if (status st = send_msg(sock, worker_heartbeat{plan->step}); !st.ok()) {
            pending.wait();  // the job reads *plan
            return st;
          }
        }
        if (status_or<sched::step_result> res = pending.get(); res.ok()) {
          r = std::move(res).value();
        } else {
          r.step = plan->step;
          r.error = res.get_status();
        }
      }
      HART_RETURN_IF_ERROR(send_msg(sock, r));
    } else if (std::holds_alternative<worker_bye>(m)) {
      HART_LOG_INFO("worker %lld: the server said bye", (long long)p.hello.pid);
      return {};
    }
  }
}

}  // namespace hart::worker_link
