// A client that stops reading mid-stream (issue 27, finding 2: the server dropped 92,000 chunks
// and every final without a word, and kept generating). `hart serve` on tiny-a with a small send
// limit and a 500 ms slow-reader timeout; the slow client is a raw DEALER with a one-message
// pipe and a 4 KB receive buffer that asks for 8 long samples with top-20 log-probs (big
// chunks) and reads nothing. The server must declare it slow, abort its generation (nothing
// runs, no more tokens are made, its pages come back), and once it reads it gets its chunks in
// order, one resource_exhausted error, then a final with reason abort for each sample; the
// stats count it. Meanwhile another client is served normally.
#include "runtime/protocol/codec.h"
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"
#include "tests/serve/server_stats.h"

#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

TEST(serve_slow_reader, is_told_its_generations_are_aborted_and_nothing_is_lost_silently) {
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a",
                     {"--send-hwm", "16", "--slow-reader-ms", "500"});
  ASSERT_FALSE(srv.endpoint().empty());
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto other = transport::client::connect(cp);
  ASSERT_TRUE(other.ok()) << other.get_status().to_string();

  zmq::context_t ctx;
  zmq::socket_t slow(ctx, zmq::socket_type::dealer);
  slow.set(zmq::sockopt::rcvhwm, 1);
  slow.set(zmq::sockopt::rcvbuf, 4096);
  slow.set(zmq::sockopt::linger, 0);
  slow.connect(srv.endpoint());
  protocol::generate_request g;
  g.request_id = 5;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids = {6, 37, 68, 99, 130, 161, 192, 223};
  g.sampling.n = 8;
  g.sampling.temperature = 1.0f;
  g.sampling.max_new_tokens = 6000;
  g.sampling.ignore_eos = true;
  g.sampling.logprobs = true;
  g.sampling.top_logprobs = protocol::max_top_logprobs;
  auto enc = protocol::encode_request(protocol::request{g});
  ASSERT_TRUE(enc.ok());
  ASSERT_TRUE(slow.send(zmq::buffer(enc->header), zmq::send_flags::sndmore));
  ASSERT_TRUE(slow.send(zmq::buffer(enc->payload), zmq::send_flags::none));

  // The server notices within its timeout of the pipe filling, and aborts the generation.
  std::map<std::string, double> st;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t tag = 1;; ++tag) {
    st = stats_of(**other, tag);
    if (st["slow_clients"] >= 1 && st["running"] == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 120s)
        << "never declared slow (running " << st["running"] << ")";
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(st["slow_clients"], 1);
  const double made = st["generated_tokens"];
  EXPECT_LT(made, 8 * 6000) << "the generation ran to its end";
  // Another client is served meanwhile, and nothing more is generated for the slow one.
  protocol::generate_request h = g;
  h.request_id = 6;
  h.sampling.n = 1;
  h.sampling.max_new_tokens = 4;
  h.sampling.top_logprobs = 0;
  auto res = (*other)->generate(h, 60s);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  EXPECT_EQ(res->samples[0].token_ids.size(), 4u);
  st = stats_of(**other, 1000);
  EXPECT_EQ(st["generated_tokens"], made + 4);
  EXPECT_EQ(st["running"], 0);

  // Now the slow client reads: chunks in order per sample, one error, a final per sample.
  std::vector<uint32_t> next_seq(8, 0);
  int errors = 0, finals = 0;
  uint64_t chunks = 0;
  while (finals < 8) {
    zmq::pollitem_t item{slow.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_GT(zmq::poll(&item, 1, std::chrono::milliseconds(30000)), 0)
        << "replies stopped after " << finals << " finals";
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(slow, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 2u);
    auto r =
        protocol::decode_reply({frames[0].data(), frames[0].size()}, {frames[1].data(), frames[1].size()});
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (auto* c = std::get_if<protocol::chunk_event>(&*r)) {
      ASSERT_EQ(errors, 0) << "a chunk after the slow-reader error";
      ASSERT_LT(c->sample_index, 8u);
      EXPECT_EQ(c->seq, next_seq[c->sample_index]++) << "sample " << c->sample_index;
      ++chunks;
    } else if (auto* e = std::get_if<protocol::error_reply>(&*r)) {
      EXPECT_EQ(e->code, status_code::resource_exhausted);
      EXPECT_NE(e->message.find("aborted"), std::string::npos) << e->message;
      ++errors;
    } else if (auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_EQ(errors, 1) << "the error comes before the finals";
      EXPECT_EQ(f->request_id, 5u);
      EXPECT_EQ(f->reason, protocol::finish_reason::abort);
      ++finals;
    } else {
      ADD_FAILURE() << "unexpected reply (an abort the client did not send must not be acked)";
    }
  }
  EXPECT_EQ(errors, 1);
  st = stats_after_flush(**other, 1001);
  EXPECT_GT(st["replies_dropped_slow"], 0);
  EXPECT_EQ(st["cache_full_pages_used"], 0) << "the aborted generation's pages came back";
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
  std::printf("slow reader: %llu chunks delivered, %.0f dropped, %.0f tokens generated before the abort\n",
              (unsigned long long)chunks, st["replies_dropped_slow"], made);
}

}  // namespace
}  // namespace hart::testing
