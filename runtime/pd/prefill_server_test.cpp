// The prefill server (prefill_server.h) in this process, driven by a real
// DEALER over tcp 127.0.0.1 speaking the real wire, as a decode server would:
// - a prefill is answered with chunks (several, under a small byte limit)
//   and kvDone; its pages stay held until kvAck, then go to the prefix cache:
//   no page is held by a request, the index's invariants hold, and a second
//   prompt with the same prefix hits that cache;
// - a decode side that answers kvRefuse, or never answers (killed
//   mid-transfer), leaves nothing held either (the latter after the ack
//   timeout);
// - a prefill for pages laid out otherwise is refused before computing;
// - skipFull leaves the decode side's pages out of the chunks.
#include "runtime/pd/prefill_server.h"

#include "runtime/model/kv_store.h"
#include "runtime/pd/link_socket.h"
#include "runtime/pd_link/pd_codec.h"
#include "runtime/worker/serving_loop.h"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

namespace hart::pd {
namespace {

using namespace hart::pd_link;
using namespace std::chrono_literals;

constexpr int64_t k_page = 128;

class prefill_server_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_params p;
    p.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
    p.deterministic = true;
    auto e = engine::load(p);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() { delete eng_; }

  void SetUp() override {
    ASSERT_NE(eng_, nullptr);
    sched::serving_params sp;
    sp.cache = {k_page, 32, 16, 128, true};
    sp = worker::serving_params_for(*eng_, sp, nullptr);
    prefill_server_params pp;
    pp.cache = sp.cache;
    pp.prefill_chunk = 100;
    auto store = eng_->make_store(k_page);
    ASSERT_TRUE(store.ok());
    layout_ = (*store)->layout_id();
    // Room for a full page and an SWA page: several chunks for a few pages.
    pp.max_chunk_bytes =
        size_t((*store)->full_page_floats() * 2 + (*store)->swa_page_floats()) * sizeof(float);
    pp.ack_timeout_ms = 300;
    auto s = prefill_server::start(*eng_, pp);
    ASSERT_TRUE(s.ok()) << s.get_status().to_string();
    srv_ = std::move(s).value();
    dealer_ = link_socket(ctx_, zmq::socket_type::dealer);
    dealer_.set(zmq::sockopt::rcvtimeo, 30000);
    dealer_.connect(srv_->endpoint());
  }

  static std::vector<int32_t> prompt(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = int32_t(2 + rng() % 500);
    return p;
  }

  void send(const pd_message& m) { ASSERT_TRUE(link_send(dealer_, nullptr, m).ok()); }

  pd_message recv() {
    zmq::message_t frame;
    if (!dealer_.recv(frame)) {
      ADD_FAILURE() << "no message from the prefill server";
      return {};
    }
    auto m = pd_link::decode(frame.data(), frame.size());
    EXPECT_TRUE(m.ok()) << m.get_status().to_string();
    return m.ok() ? *m : pd_message{};
  }

  struct answer {
    std::vector<kv_pages> chunks;
    std::optional<kv_done> done;
    std::optional<kv_refuse> refused;
  };

  // Sends a prefill and reads the answer up to kvDone or kvRefuse.
  answer prefill(uint64_t tid, const std::vector<int32_t>& tokens, int64_t skip_full = 0,
                 uint64_t layout = 0) {
    prefill_request p;
    p.tokens = tokens;
    p.sampling.temperature = 0.0f;
    p.sampling.max_new_tokens = 1;
    p.skip_full = skip_full;
    p.layout = layout ? layout : layout_;
    p.page_size = k_page;
    send({tid, tid, p});
    answer a;
    for (;;) {
      pd_message m = recv();
      EXPECT_EQ(m.transfer_id, tid);
      if (auto* c = std::get_if<kv_chunk>(&m.body)) {
        a.chunks.push_back(std::move(c->kv));
      } else if (auto* d = std::get_if<kv_done>(&m.body)) {
        a.done = *d;
        return a;
      } else if (auto* r = std::get_if<kv_refuse>(&m.body)) {
        a.refused = *r;
        return a;
      } else {
        ADD_FAILURE() << "unexpected message kind " << m.body.index();
        return a;
      }
    }
  }

  // Nothing held by a request: every used page is the prefix cache's, the invariants hold.
  void expect_nothing_held(const prefill_server_state& st) {
    EXPECT_EQ(st.held, 0);
    EXPECT_TRUE(st.check.ok()) << st.check.to_string();
    EXPECT_EQ(st.cache.full_pages_used * k_page, st.cache.tree_full_tokens);
  }

  // state() once `pred` holds, for up to 10 s.
  prefill_server_state wait_for(const std::function<bool(const prefill_server_state&)>& pred) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      prefill_server_state st = srv_->state();
      if (pred(st) || std::chrono::steady_clock::now() > until) return st;
      std::this_thread::sleep_for(10ms);
    }
  }

  static engine* eng_;
  uint64_t layout_ = 0;
  std::unique_ptr<prefill_server> srv_;
  zmq::context_t ctx_;
  zmq::socket_t dealer_;
};

engine* prefill_server_test::eng_ = nullptr;

TEST_F(prefill_server_test, pages_are_held_until_the_ack_then_cached) {
  const std::vector<int32_t> p = prompt(450, 1);
  answer a = prefill(1, p);
  ASSERT_TRUE(a.done.has_value());
  EXPECT_GE(a.chunks.size(), 2u) << "several chunks under the limit";
  EXPECT_EQ(a.done->n_chunks, a.chunks.size());
  EXPECT_EQ(a.chunks.front().first_page, 0);
  EXPECT_EQ(a.chunks.back().end_page, 4);
  EXPECT_EQ(srv_->state().held, 1) << "held until the decode side answers";
  send({1, 1, kv_ack{}});
  prefill_server_state st = wait_for([](const prefill_server_state& s) { return s.acked == 1; });
  EXPECT_EQ(st.acked, 1);
  expect_nothing_held(st);
  EXPECT_EQ(st.cache.tree_full_tokens, 3 * k_page) << "its whole pages cached";

  // The same prefix again: computed from the cache, the same first token.
  const int64_t cached_before = st.cache.cached_tokens;
  answer b = prefill(2, p);
  ASSERT_TRUE(b.done.has_value());
  EXPECT_EQ(b.done->first_token, a.done->first_token);
  EXPECT_EQ(b.done->first_logprob, a.done->first_logprob);
  send({2, 2, kv_ack{}});
  st = wait_for([](const prefill_server_state& s) { return s.acked == 2; });
  EXPECT_GT(st.cache.cached_tokens, cached_before) << "a prefix hit on the prefill side";
  expect_nothing_held(st);
}

TEST_F(prefill_server_test, a_refusal_or_no_answer_frees_the_pages) {
  answer a = prefill(1, prompt(300, 2));
  ASSERT_TRUE(a.done.has_value());
  send({1, 1, kv_refuse{refuse_reason::bad_chunk, "the test refuses it"}});
  prefill_server_state st = wait_for([](const prefill_server_state& s) { return s.refused == 1; });
  EXPECT_EQ(st.refused, 1);
  expect_nothing_held(st);

  // A decode side that never answers (killed mid-transfer): freed after the ack timeout.
  answer b = prefill(2, prompt(300, 3));
  ASSERT_TRUE(b.done.has_value());
  st = wait_for([](const prefill_server_state& s) { return s.timed_out == 1; });
  EXPECT_EQ(st.timed_out, 1);
  expect_nothing_held(st);
  // Its late ack changes nothing.
  send({2, 2, kv_ack{}});
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(srv_->state().acked, 0);
  expect_nothing_held(srv_->state());
}

TEST_F(prefill_server_test, another_layout_is_refused_before_computing) {
  answer a = prefill(1, prompt(200, 4), 0, layout_ ^ 1);
  ASSERT_TRUE(a.refused.has_value());
  EXPECT_EQ(a.refused->reason, refuse_reason::layout_mismatch) << a.refused->message;
  EXPECT_TRUE(a.chunks.empty());
  const prefill_server_state st = srv_->state();
  EXPECT_EQ(st.prefills, 0);
  EXPECT_EQ(st.cache.requests, 0) << "nothing admitted";
  expect_nothing_held(st);
}

TEST_F(prefill_server_test, skip_full_leaves_the_decode_sides_pages_out) {
  answer a = prefill(1, prompt(450, 5), /*skip_full=*/2);
  ASSERT_TRUE(a.done.has_value());
  int64_t full_pages = 0;
  for (const kv_pages& kv : a.chunks) {
    EXPECT_EQ(kv.first_full, 2);
    full_pages += kv.n_full_carried();
  }
  EXPECT_EQ(full_pages, 2) << "pages 2 and 3 of 4";
  send({1, 1, kv_ack{}});
  expect_nothing_held(wait_for([](const prefill_server_state& s) { return s.acked == 1; }));
}

}  // namespace
}  // namespace hart::pd
