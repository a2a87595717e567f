// A prefilled sequence handed from a prefill thread to a decode thread over a
// real ZeroMQ socket pair (a ROUTER and a DEALER on tcp 127.0.0.1, a port the
// OS picks), as the PD servers will hand it (docs/pd.md): prefill, then the KV
// as kv_chunk frames of whole pages under a small byte limit (several chunks,
// the last one partial), kv_done with the first sampled token, kv_ack.
// Decoding on the receiver's pages gives the sender's logits bit for bit
// (deterministic mode), also when the receiver holds the prefix's full pages
// (skip_full > 0). A chunk spoilt mid-transfer (another layout, a page count
// its floats do not fill) is refused with its typed reason, and nothing is
// written into the receiver's pages from that chunk on.
#include "runtime/core/status_testing.h"
#include "runtime/pd_link/pd_codec.h"
#include "runtime/sample/sampler.h"
#include "tests/cache/kv_transfer_fixture.h"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace hart::testing {
namespace {

using namespace hart::pd_link;

constexpr int64_t k_page = k_hand_off_page;
constexpr int64_t k_prompt = 520;  // 5 pages: before and past every window of the tiny models
constexpr int64_t k_decode = 4;    // positions decoded after the hand-off
constexpr uint64_t k_request = 41, k_transfer = 77, k_weight_version = 3;
constexpr int k_recv_timeout_ms = 60000;  // a hung peer fails the test instead of hanging it
constexpr float k_sentinel = -7.0f;

zmq::socket_t pd_socket(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, k_recv_timeout_ms);
  s.set(zmq::sockopt::maxmsgsize, int64_t(max_frame_bytes + 64));
  return s;
}

// One message: [routing id] (ROUTER side only) [frame].
status send_message(zmq::socket_t& s, const zmq::message_t* routing_id, const pd_message& m) {
  HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, pd_link::encode(m));
  if (routing_id && !s.send(zmq::buffer(routing_id->data(), routing_id->size()), zmq::send_flags::sndmore))
    return unavailable("send: the routing id did not go");
  if (!s.send(zmq::buffer(frame), zmq::send_flags::none)) return unavailable("send: the frame did not go");
  return {};
}

// The frame of the next message, its routing id into `routing_id` on the ROUTER side.
status_or<zmq::message_t> recv_frame(zmq::socket_t& s, zmq::message_t* routing_id) {
  if (routing_id && !s.recv(*routing_id))
    return unavailable("recv: no message within %d ms", k_recv_timeout_ms);
  zmq::message_t frame;
  if (!s.recv(frame)) return unavailable("recv: no message within %d ms", k_recv_timeout_ms);
  return frame;
}

// How the prefill side spoils its second chunk, for the receiver to refuse.
enum class spoil { none, layout, page_count };

// The prefill server's part: admits the prefill, computes the prompt on its
// own pages, samples the first token, sends the KV in chunks and kv_done, and
// takes the decode side's answer.
struct prefill_side {
  prefill_side(const engine& e, kv_store& s, sequence_state& q, size_t limit, spoil h = spoil::none)
      : eng(e), store(s), seq(q), max_chunk_bytes(limit), how(h) {}

  const engine& eng;
  kv_store& store;
  sequence_state& seq;  // bound to `store`, nothing computed yet
  const size_t max_chunk_bytes;
  const spoil how;

  std::vector<kv_page_range> plan;  // the chunks sent
  std::vector<size_t> chunk_bytes;  // their KV bytes
  kv_done done;                     // as sent
  pd_message answer;                // kv_ack or kv_refuse

  status run(zmq::socket_t& router) {
    zmq::message_t peer;
    HART_ASSIGN_OR_RETURN(zmq::message_t first, recv_frame(router, &peer));
    HART_ASSIGN_OR_RETURN(pd_message m, pd_link::decode(first.data(), first.size()));
    const auto* p = std::get_if<prefill_request>(&m.body);
    if (!p) return failed_precondition("prefill side: the first message is not a prefill");
    const int64_t n = int64_t(p->tokens.size());
    std::vector<float> logits;
    for (int64_t at = 0; at < n; at += 100) {  // chunked prefill, as a prefill server runs it
      const int64_t end = std::min(at + 100, n);
      const std::vector<int32_t> part(p->tokens.begin() + at, p->tokens.begin() + end);
      HART_RETURN_IF_ERROR(
          eng.prefill(seq, part, end == n ? logits_request::last : logits_request::none, &logits));
    }
    sampling_params sp;
    sp.temperature = p->sampling.temperature;
    sp.seed = p->sampling.seed;
    done.first_token = sampler(sp).sample(logits.data(), eng.config().vocab_size, &done.first_logprob);
    done.weight_version = k_weight_version;

    HART_ASSIGN_OR_RETURN(plan, kv_pages_plan(store, eng.config(), n, p->skip_full, max_chunk_bytes));
    for (size_t i = 0; i < plan.size(); ++i) {
      HART_ASSIGN_OR_RETURN(kv_pages kv,
                            kv_pages_export(store, eng.config(), *seq.pages, n, p->skip_full, plan[i]));
      chunk_bytes.push_back((kv.full.size() + kv.swa.size()) * sizeof(float));
      if (i == 1 && how == spoil::layout) kv.layout ^= 1;
      if (i == 1 && how == spoil::page_count) ++kv.end_page;
      HART_RETURN_IF_ERROR(
          send_message(router, &peer, {m.request_id, m.transfer_id, kv_chunk{std::move(kv)}}));
    }
    done.n_chunks = uint32_t(plan.size());
    HART_RETURN_IF_ERROR(send_message(router, &peer, {m.request_id, m.transfer_id, done}));
    HART_ASSIGN_OR_RETURN(zmq::message_t reply, recv_frame(router, &peer));
    HART_ASSIGN_OR_RETURN(answer, pd_link::decode(reply.data(), reply.size()));
    return {};
  }
};

// The decode server's part: asks for the prefill, imports every chunk into the
// pages it reserved, and answers kv_done with kv_ack, or refuses the transfer
// at the first chunk that does not fit (and ignores the rest of it).
struct decode_side {
  decode_side(kv_store& s, std::vector<int32_t> f, std::vector<int32_t> w)
      : store(s), full(std::move(f)), swa(std::move(w)) {}

  kv_store& store;
  const std::vector<int32_t> full, swa;  // the reserved pages, by position

  int64_t n_imported = 0;
  std::optional<kv_refuse> refused;
  std::optional<kv_done> done;

  status refuse(zmq::socket_t& dealer, refuse_reason why, std::string message) {
    refused = kv_refuse{why, std::move(message)};
    return send_message(dealer, nullptr, {k_request, k_transfer, *refused});
  }

  status run(zmq::socket_t& dealer, const prefill_request& p) {
    HART_RETURN_IF_ERROR(send_message(dealer, nullptr, {k_request, k_transfer, p}));
    while (!done) {
      HART_ASSIGN_OR_RETURN(zmq::message_t frame, recv_frame(dealer, nullptr));
      status_or<pd_message> m = pd_link::decode(frame.data(), frame.size());
      if (!m.ok()) {
        if (!refused)
          HART_RETURN_IF_ERROR(refuse(dealer, refuse_reason::bad_chunk, m.get_status().message()));
        continue;
      }
      if (refused) {
        if (std::holds_alternative<kv_done>(m->body)) done = std::get<kv_done>(m->body);
        continue;
      }
      if (m->transfer_id != k_transfer) {
        HART_RETURN_IF_ERROR(
            refuse(dealer, refuse_reason::unknown_transfer, "transfer " + std::to_string(m->transfer_id)));
      } else if (const auto* c = std::get_if<kv_chunk>(&m->body)) {
        if (c->kv.layout != store.layout_id()) {
          HART_RETURN_IF_ERROR(refuse(dealer, refuse_reason::layout_mismatch, "another model's pages"));
          continue;
        }
        const status st = kv_pages_import(c->kv, store, full, swa);
        if (!st.ok()) {
          HART_RETURN_IF_ERROR(refuse(dealer, refuse_reason::bad_chunk, st.message()));
        } else {
          ++n_imported;
        }
      } else if (const auto* d = std::get_if<kv_done>(&m->body)) {
        done = *d;
        if (int64_t(d->n_chunks) != n_imported) {
          HART_RETURN_IF_ERROR(refuse(
              dealer, refuse_reason::bad_chunk,
              std::to_string(d->n_chunks) + " chunks sent, " + std::to_string(n_imported) + " imported"));
        } else {
          HART_RETURN_IF_ERROR(send_message(dealer, nullptr, {k_request, k_transfer, kv_ack{}}));
        }
      } else {
        return failed_precondition("decode side: an unexpected message kind %zu", m->body.index());
      }
    }
    return {};
  }
};

class pd_wire : public kv_hand_off_test {
 protected:
  // Room for a page of both kinds and one more full page: on the tiny models
  // (SWA pages ~10x full ones, full-only pages first), chunks of several
  // full-only pages, then one page of both each, the last under the limit.
  size_t chunk_limit(const kv_store& s) const {
    return size_t(2 * s.full_page_floats() + s.swa_page_floats()) * sizeof(float);
  }

  // Runs the hand-off of the first k_prompt tokens between a prefill thread and this thread.
  void hand_off(prefill_side& sender, decode_side& receiver, int64_t skip_full) const {
    zmq::context_t ctx;
    zmq::socket_t router = pd_socket(ctx, zmq::socket_type::router);
    router.bind("tcp://127.0.0.1:*");
    zmq::socket_t dealer = pd_socket(ctx, zmq::socket_type::dealer);
    dealer.connect(router.get(zmq::sockopt::last_endpoint));

    status sent;
    std::thread prefill_thread([&] { sent = sender.run(router); });
    prefill_request p;
    p.tokens = tokens(0, k_prompt);
    p.sampling.temperature = 0.0f;
    p.skip_full = skip_full;
    const status received = receiver.run(dealer, p);
    prefill_thread.join();
    EXPECT_TRUE(sent.ok()) << sent.to_string();
    EXPECT_TRUE(received.ok()) << received.to_string();
  }

  // Position n (the first sampled token) and k_decode - 1 more decoded by the sender `a`
  // and the receiver `b`: every step's logits equal, bit for bit.
  void expect_same_decode(sequence_state& a, sequence_state& b, int32_t first_token) const {
    std::vector<int32_t> next = {first_token};
    for (int64_t p = k_prompt; p < k_prompt + k_decode; ++p) {
      expect_same_step(a, b, next, p);
      next = tokens(p + 1, p + 2);
    }
  }
};

TEST_P(pd_wire, a_chunked_hand_off_over_zeromq_decodes_as_the_sender_does) {
  const engine& eng = *g_->eng;
  const int64_t total = k_prompt + k_decode;
  for (int64_t skip : {int64_t{0}, (k_prompt - 1) / k_page - 1}) {
    SCOPED_TRACE(std::to_string(skip) + " full pages held by the receiver");
    std::unique_ptr<kv_store> sender_store = hand_off_pool(eng), receiver_store = hand_off_pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender_store.get(), hand_off_ids(total, false), hand_off_ids(total, false), 0);
    const std::vector<int32_t> full = hand_off_ids(total, true), swa = hand_off_ids(total, true);
    if (skip > 0) {  // a prefix hit on the decode side: it computed those pages itself
      sequence_state prefix = eng.new_sequence();
      engine::bind_pages(prefix, receiver_store.get(), full, swa, 0);
      std::vector<float> unused;
      ASSERT_TRUE(eng.prefill(prefix, tokens(0, skip * k_page), logits_request::none, &unused).ok());
    }

    prefill_side sender(eng, *sender_store, a, chunk_limit(*sender_store));
    decode_side receiver(*receiver_store, full, swa);
    hand_off(sender, receiver, skip);
    ASSERT_TRUE(std::holds_alternative<kv_ack>(sender.answer.body))
        << (receiver.refused ? receiver.refused->message : "no answer");
    EXPECT_EQ(sender.answer.request_id, k_request);
    EXPECT_EQ(sender.answer.transfer_id, k_transfer);
    if (skip == 0) {
      EXPECT_GE(sender.chunk_bytes.size(), 3u) << "several chunks";
      EXPECT_LT(sender.chunk_bytes.back(), sender.max_chunk_bytes) << "the last one partial";
    }
    EXPECT_EQ(receiver.n_imported, int64_t(sender.plan.size()));
    for (size_t bytes : sender.chunk_bytes) EXPECT_LE(bytes, sender.max_chunk_bytes);
    ASSERT_TRUE(receiver.done.has_value());
    EXPECT_EQ(receiver.done->first_token, sender.done.first_token);
    EXPECT_EQ(receiver.done->first_logprob, sender.done.first_logprob);
    EXPECT_EQ(receiver.done->weight_version, k_weight_version);

    sequence_state b = eng.new_sequence();
    engine::bind_pages(b, receiver_store.get(), full, swa, k_prompt);
    expect_same_decode(a, b, receiver.done->first_token);
  }
}

TEST_P(pd_wire, a_chunk_refused_mid_transfer_writes_nothing) {
  const engine& eng = *g_->eng;
  for (spoil how : {spoil::layout, spoil::page_count}) {
    SCOPED_TRACE(how == spoil::layout ? "another layout" : "a page more than its floats fill");
    std::unique_ptr<kv_store> sender_store = hand_off_pool(eng), receiver_store = hand_off_pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender_store.get(), hand_off_ids(k_prompt, false), hand_off_ids(k_prompt, false),
                       0);
    for (int32_t pg = 0; pg < k_hand_off_pages; ++pg) {
      std::fill_n(receiver_store->full_page(pg), receiver_store->full_page_floats(), k_sentinel);
      std::fill_n(receiver_store->swa_page(pg), receiver_store->swa_page_floats(), k_sentinel);
    }
    const std::vector<int32_t> full = hand_off_ids(k_prompt, true), swa = hand_off_ids(k_prompt, true);

    prefill_side sender(eng, *sender_store, a, chunk_limit(*sender_store), how);
    decode_side receiver(*receiver_store, full, swa);
    hand_off(sender, receiver, 0);
    ASSERT_TRUE(std::holds_alternative<kv_refuse>(sender.answer.body));
    const kv_refuse& why = std::get<kv_refuse>(sender.answer.body);
    EXPECT_EQ(why.reason, how == spoil::layout ? refuse_reason::layout_mismatch : refuse_reason::bad_chunk)
        << refuse_reason_name(why.reason) << ": " << why.message;
    EXPECT_EQ(receiver.n_imported, 1) << "the chunk before the spoilt one";

    auto sentinel = [](const float* p, int64_t floats) {
      return std::all_of(p, p + floats, [](float v) { return v == k_sentinel; });
    };
    for (int64_t pg = sender.plan.at(1).first_page; pg < (k_prompt + k_page - 1) / k_page; ++pg) {
      EXPECT_TRUE(sentinel(receiver_store->full_page(full[pg]), receiver_store->full_page_floats()))
          << "page " << pg;
      EXPECT_TRUE(sentinel(receiver_store->swa_page(swa[pg]), receiver_store->swa_page_floats()))
          << "page " << pg;
    }
    const kv_page_range first = sender.plan.front();
    EXPECT_FALSE(
        sentinel(receiver_store->full_page(full[first.end_page - 1]), receiver_store->full_page_floats()))
        << "the first chunk's last page is in";
  }
}

INSTANTIATE_TEST_SUITE_P(tiny, pd_wire, ::testing::Values("tiny-a", "tiny-b", "tiny-c"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace hart::testing
