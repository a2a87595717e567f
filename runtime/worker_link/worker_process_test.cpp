// The worker side of the link against the scheduler side, in one process over real
// sockets: worker_process_run (what `hart worker` runs) connected to a remote_worker. The
// executor is made from the configure's pages on the engine thread, steps come back, a step
// longer than the heartbeat timeout survives on heartbeats, an executor's failure is the
// step's error, and the server's bye ends the loop cleanly.
#include "runtime/worker_link/worker_process.h"

#include "runtime/worker_link/remote_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace hart::worker_link {
namespace {

model_summary summary() {
  return {100, 16, 2, 128, "exact", false};
}

// Answers each item that samples with its last token + 1, after `delay_ms`; a plan whose first
// token is 99 fails.
class echo_executor final : public sched::step_executor {
 public:
  explicit echo_executor(const std::atomic<int>* delay_ms) : delay_ms_(delay_ms) {}
  status_or<sched::step_result> execute(const sched::step_plan& plan) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_->load()));
    if (!plan.items.empty() && plan.items[0].tokens.at(0) == 99) return internal_error("echo: token 99");
    sched::step_result r;
    r.step = plan.step;
    for (const sched::step_item& it : plan.items) {
      if (it.sample_last) r.sampled.push_back({it.seq_id, it.tokens.back() + 1, 0.f, {}});
    }
    return r;
  }

 private:
  const std::atomic<int>* delay_ms_;
};

sched::step_plan plan(uint64_t step, int32_t first) {
  sched::step_plan p;
  p.step = step;
  sched::step_item it;
  it.seq_id = 5;
  it.tokens = {first, 41};
  it.sample_last = true;
  p.items.push_back(it);
  return p;
}

TEST(worker_process, serves_a_remote_worker_until_its_bye) {
  remote_worker_params rp;
  rp.config = {128, 16, 8, 0};
  rp.expect = summary();
  rp.heartbeat_timeout_ms = 200;  // the worker is told to beat every 50 ms
  rp.hello_timeout_ms = 5000;
  auto rw = remote_worker::start(rp);
  ASSERT_TRUE(rw.ok()) << rw.get_status().to_string();

  std::atomic<int> delay_ms{0};
  std::atomic<int> made{0};
  cache::cache_config got_pages;
  worker_process_params wp;
  wp.connect = (*rw)->endpoint();
  wp.hello.pid = 4242;
  wp.hello.model = summary();
  wp.make_executor =
      [&](const cache::cache_config& pages) -> status_or<std::unique_ptr<sched::step_executor>> {
    got_pages = pages;
    ++made;
    return std::unique_ptr<sched::step_executor>(new echo_executor(&delay_ms));
  };
  status ended = internal_error("the loop did not return");
  std::thread worker([&] { ended = worker_process_run(wp); });

  auto r = (*rw)->execute(plan(1, 7));
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_TRUE(r->error.ok());
  ASSERT_EQ(r->sampled.size(), 1u);
  EXPECT_EQ(r->sampled[0].token, 42);
  EXPECT_EQ((*rw)->worker_pid(), 4242);
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(got_pages.page_size, 128);
  EXPECT_EQ(got_pages.n_full_pages, 16);
  EXPECT_EQ(got_pages.n_swa_pages, 8);

  delay_ms = 700;  // 3.5x the heartbeat timeout: alive on heartbeats
  r = (*rw)->execute(plan(2, 8));
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  ASSERT_EQ(r->sampled.size(), 1u);
  delay_ms = 0;

  r = (*rw)->execute(plan(3, 99));  // the executor fails: the step's error, the worker goes on
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->error.code(), status_code::internal);
  r = (*rw)->execute(plan(4, 9));
  ASSERT_TRUE(r.ok() && r->error.ok());

  rw->reset();  // says bye
  worker.join();
  EXPECT_TRUE(ended.ok()) << ended.to_string();
}

TEST(worker_process, a_bad_endpoint_is_refused) {
  worker_process_params wp;
  wp.connect = "not an endpoint";
  wp.make_executor = [](const cache::cache_config&) -> status_or<std::unique_ptr<sched::step_executor>> {
    return internal_error("never made");
  };
  EXPECT_EQ(worker_process_run(wp).code(), status_code::invalid_argument);
}

}  // namespace
}  // namespace hart::worker_link
