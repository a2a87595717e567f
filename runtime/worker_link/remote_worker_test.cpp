#include "runtime/worker_link/remote_worker.h"

#include "runtime/core/status_testing.h"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <thread>

namespace hart::worker_link {
namespace {

model_summary summary() {
  return {100, 16, 2, 128, "exact", false};
}

sched::step_plan plan(uint64_t step) {
  sched::step_plan p;
  p.step = step;
  sched::step_item it;
  it.seq_id = 5;
  it.tokens = {1, 2};
  it.sample_last = true;
  p.items.push_back(it);
  return p;
}

void send(zmq::socket_t& s, const worker_message& m) {
  auto f = encode(m);
  (void)s.send(zmq::buffer(*f), zmq::send_flags::none);
}

worker_message recv(zmq::socket_t& s) {
  zmq::message_t msg;
  (void)s.recv(msg);
  return decode(msg.data(), msg.size()).value();
}

// A fake worker's DEALER socket on `ep`, its hello (pid, model) already sent.
zmq::socket_t fake_worker(zmq::context_t& ctx, const std::string& ep, int64_t pid, const model_summary& model,
                          const std::string& token = "") {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(ep);
  worker_hello h;
  h.pid = pid;
  h.model = model;
  h.token = token;
  send(s, h);
  return s;
}

// A fake worker thread: hello, configure, `n_steps` plans answered, then silence.
TEST(remote_worker, steps_then_timeout) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.step_timeout_ms = 300;
  p.hello_timeout_ms = 5000;
  auto rw = remote_worker::start(p);
  ASSERT_TRUE(rw.ok()) << rw.get_status().to_string();
  const std::string ep = (*rw)->endpoint();
  std::thread fake([ep] {
    zmq::context_t ctx;
    zmq::socket_t s = fake_worker(ctx, ep, 77, summary());
    auto c = recv(s);
    EXPECT_EQ(std::get<worker_configure>(c).n_full_pages, 16);
    auto m = recv(s);
    const auto& pl = std::get<sched::step_plan>(m);
    sched::step_result r;
    r.step = pl.step;
    r.sampled.push_back({5, 9, 0.f, {}});
    send(s, r);
    (void)recv(s);  // the second plan: never answered
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  });
  auto r = (*rw)->execute(plan(1));
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ((*rw)->worker_pid(), 77);
  ASSERT_EQ(r->sampled.size(), 1u);
  EXPECT_EQ(r->sampled[0].token, 9);
  auto r2 = (*rw)->execute(plan(2));
  EXPECT_STATUS(r2, status_code::unavailable, "did not answer");
  EXPECT_EQ((*rw)->worker_pid(), 0);
  fake.join();
}

// Heartbeats: a step answered after 3x the heartbeat timeout succeeds while
// the worker keeps sending heartbeats; a worker that goes silent mid-step
// (frozen) fails it after the heartbeat timeout, long before the step timeout.
TEST(remote_worker, heartbeats_tell_a_slow_step_from_a_frozen_worker) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.step_timeout_ms = 60000;
  p.heartbeat_timeout_ms = 200;
  p.hello_timeout_ms = 5000;
  auto rw = remote_worker::start(p);
  ASSERT_TRUE(rw.ok()) << rw.get_status().to_string();
  const std::string ep = (*rw)->endpoint();
  std::thread fake([ep] {
    zmq::context_t ctx;
    zmq::socket_t s = fake_worker(ctx, ep, 78, summary());
    const auto c = std::get<worker_configure>(recv(s));
    EXPECT_EQ(c.heartbeat_ms, 50) << "a quarter of the heartbeat timeout";
    const auto first = std::get<sched::step_plan>(recv(s));
    for (int i = 0; i < 12; ++i) {  // 600 ms of work, a heartbeat every 50 ms
      std::this_thread::sleep_for(std::chrono::milliseconds(c.heartbeat_ms));
      send(s, worker_heartbeat{first.step});
    }
    sched::step_result r;
    r.step = first.step;
    r.sampled.push_back({5, 9, 0.f, {}});
    send(s, r);
    (void)recv(s);  // the second plan: one heartbeat, then frozen
    send(s, worker_heartbeat{2});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  });
  auto r = (*rw)->execute(plan(1));
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  ASSERT_EQ(r->sampled.size(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  auto r2 = (*rw)->execute(plan(2));
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_STATUS(r2, status_code::unavailable, "no heartbeat");  // not ASSERT_: fake.join() must still run
  EXPECT_LT(waited, std::chrono::milliseconds(1200))
      << "dropped after the heartbeat timeout, not the step timeout";
  EXPECT_EQ((*rw)->worker_pid(), 0);
  fake.join();
}

// Between steps: nothing to report while the worker lives; its bye is a loss
// of its pages, reported once.
TEST(remote_worker, idle_check_reports_a_worker_that_left) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.hello_timeout_ms = 5000;
  auto rw = remote_worker::start(p);
  ASSERT_TRUE(rw.ok()) << rw.get_status().to_string();
  EXPECT_GT((*rw)->idle_check_ms(), 0);
  zmq::context_t ctx;
  zmq::socket_t s = fake_worker(ctx, (*rw)->endpoint(), 78, summary());
  ASSERT_TRUE((*rw)->ensure_worker().ok());
  (void)recv(s);  // configure
  std::string why;
  EXPECT_FALSE((*rw)->check_idle(&why));
  send(s, worker_bye{});
  bool lost = false;
  for (int i = 0; i < 100 && !lost; ++i) {
    lost = (*rw)->check_idle(&why);
    if (!lost) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(lost);
  EXPECT_NE(why.find("said bye while idle"), std::string::npos) << why;
  EXPECT_EQ((*rw)->worker_pid(), 0);
  EXPECT_FALSE((*rw)->check_idle(&why)) << "reported once";
}

TEST(remote_worker, spawned_child_that_dies_is_unavailable) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.spawn_argv = {"/bin/sh", "-c", "exit 3", "sh"};
  p.hello_timeout_ms = 5000;
  auto rw = remote_worker::start(p);
  ASSERT_STATUS(rw, status_code::unavailable, "exited with status 3");
}

TEST(remote_worker, wrong_model_is_refused) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.hello_timeout_ms = 400;
  auto rw = remote_worker::start(p);
  ASSERT_TRUE(rw.ok());
  const std::string ep = (*rw)->endpoint();
  std::thread fake([ep] {
    zmq::context_t ctx;
    model_summary other = summary();
    other.vocab_size = 101;
    zmq::socket_t s = fake_worker(ctx, ep, 0, other);
    EXPECT_TRUE(std::holds_alternative<worker_bye>(recv(s)));
  });
  status st = (*rw)->ensure_worker();
  EXPECT_FALSE(st.ok());
  fake.join();
}

// A hello without the server's token (another local process dialing the loopback port) is
// refused; the worker that has it is configured.
TEST(remote_worker, a_hello_without_the_token_is_refused) {
  remote_worker_params p;
  p.config = {128, 16, 8};
  p.expect = summary();
  p.hello_timeout_ms = 2000;
  p.token = "0123456789abcdef0123456789abcdef";
  auto rw = remote_worker::start(p);
  ASSERT_TRUE(rw.ok());
  const std::string ep = (*rw)->endpoint();
  std::thread fake([ep] {
    zmq::context_t ctx;
    for (const char* wrong : {"", "0123456789abcdef0123456789abcdee", "0123"}) {
      zmq::socket_t s = fake_worker(ctx, ep, 5, summary(), wrong);
      EXPECT_TRUE(std::holds_alternative<worker_bye>(recv(s))) << wrong;
    }
    zmq::socket_t s = fake_worker(ctx, ep, 6, summary(), "0123456789abcdef0123456789abcdef");
    EXPECT_TRUE(std::holds_alternative<worker_configure>(recv(s)));
  });
  EXPECT_TRUE((*rw)->ensure_worker().ok());
  EXPECT_EQ((*rw)->worker_pid(), 6);
  fake.join();
}

}  // namespace
}  // namespace hart::worker_link
