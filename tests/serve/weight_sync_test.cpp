// Weight sync into a running `hart serve --weight-sync-endpoint` (a real
// process on 127.0.0.1, real ZeroMQ sockets): pushed weights serve exactly
// what a fresh load of the same checkpoint computes (exact and fp8), every
// token carries the version that produced it, in-flight requests go on across
// an in-place update, and a broken update (checksum, malformed frames, a
// client killed mid-push, an NCCL group that does not form) leaves the old
// weights serving.
#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"
#include "runtime/core/codecs.h"
#include "runtime/model/engine.h"
#include "runtime/transport/client.h"
#include "runtime/weight_sync/crc32c.h"
#include "runtime/weight_sync/nccl_group.h"
#include "runtime/weight_sync/sync_codec.h"
#include "tests/serve/perturbed_checkpoint.h"
#include "tests/serve/server_process.h"

#include <climits>
#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

namespace hart::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

std::string write_perturbed(float scale, const std::string& tag) {
  return testing::write_perturbed_checkpoint(k_tiny_a, scale, "wsync_" + tag);
}

std::unique_ptr<engine> load(const std::string& dir, precision prec) {
  engine_params p;
  p.model_dir = dir;
  p.prec = prec;
  p.deterministic = true;
  auto e = engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return std::move(e).value();
}

// Greedy continuation and its log-probs, computed by `eng` alone.
std::pair<std::vector<uint32_t>, std::vector<float>> greedy_alone(const engine& eng,
                                                                  const std::vector<int32_t>& prompt, int n) {
  sequence_state s = eng.new_sequence();
  std::vector<float> logits;
  EXPECT_TRUE(eng.prefill(s, prompt, logits_request::last, &logits).ok());
  std::vector<uint32_t> toks;
  std::vector<float> lps;
  for (int i = 0; i < n; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    double z = 0;
    for (float l : logits) z += std::exp(double(l) - double(logits[t]));
    lps.push_back(float(-std::log(z)));
    toks.push_back(uint32_t(t));
    EXPECT_TRUE(eng.decode({&s}, {t}, &logits).ok());
  }
  return {toks, lps};
}

// Longer than two KV pages (128 tokens), so a repeated prompt is served from the prefix cache.
const std::vector<int32_t> k_prompt = [] {
  std::vector<int32_t> p;
  for (int i = 0; i < 300; ++i) p.push_back(int32_t((i * 37 + 11) % 490 + 6));
  return p;
}();

class weight_sync_serve : public ::testing::TestWithParam<precision> {
 protected:
  void SetUp() override {
    srv_ = std::make_unique<server_process>(
        k_tiny_a,
        std::vector<std::string>{"--precision", precision_name(GetParam()), "--weight-sync-endpoint",
                                 "tcp://127.0.0.1:*", "--weight-sync-idle-ms", "3000"});
    ASSERT_FALSE(srv_->weight_sync_endpoint().empty()) << "no weight sync endpoint printed";
    transport::client_params p;
    p.endpoint = srv_->endpoint();
    auto c = transport::client::connect(p);
    ASSERT_TRUE(c.ok());
    client_ = std::move(c).value();
  }

  // Greedy generation on the server: tokens, log-probs, and every chunk's and the final's weight version.
  struct served {
    std::vector<uint32_t> tokens;
    std::vector<float> logprobs;
    std::vector<uint64_t> chunk_versions;
    uint64_t final_version = 0;
  };
  served generate(uint64_t id, int n) {
    protocol::generate_request g;
    g.request_id = id;
    g.kind = protocol::prompt_kind::token_ids;
    g.token_ids.assign(k_prompt.begin(), k_prompt.end());
    g.sampling.temperature = 0;
    g.sampling.max_new_tokens = uint32_t(n);
    g.sampling.ignore_eos = true;
    g.sampling.logprobs = true;
    served out;
    auto r = client_->generate(
        g, 60s, [&](const protocol::chunk_event& c) { out.chunk_versions.push_back(c.weight_version); });
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    if (!r.ok()) return out;
    out.tokens = r->samples[0].token_ids;
    out.logprobs = r->samples[0].logprobs;
    out.final_version = r->samples[0].final.weight_version;
    return out;
  }

  protocol::reply control(protocol::control_verb verb,
                          protocol::pause_mode mode = protocol::pause_mode::abort) {
    protocol::control_request q;
    q.tag = 77;
    q.verb = verb;
    q.mode = mode;
    EXPECT_TRUE(client_->send(protocol::request{q}).ok());
    for (;;) {
      auto r = client_->receive(20s);
      EXPECT_TRUE(r.ok());
      if (!r.ok()) return protocol::error_reply{};
      if (!std::holds_alternative<protocol::chunk_event>(*r) &&
          !std::holds_alternative<protocol::final_event>(*r))
        return *r;
    }
  }
  uint64_t serving_version() {
    return std::get<protocol::weight_version_reply>(control(protocol::control_verb::weight_version)).version;
  }

  status_or<push_report> push(const std::string& dir, uint64_t version, uint64_t bucket_bytes = 1 << 20,
                              int lanes = 1) {
    auto ts = checkpoint_tensors_open(dir);
    if (!ts.ok()) return ts.get_status();
    weight_sync_client_params p;
    p.endpoint = srv_->weight_sync_endpoint();
    p.bucket_bytes = bucket_bytes;  // small: many buckets, tensors split across them
    p.lanes = lanes;
    p.reply_timeout = 60s;
    HART_ASSIGN_OR_RETURN(auto c, weight_sync_client::connect(p));
    return c->push(version, ts->tensors);
  }

  std::unique_ptr<server_process> srv_;
  std::unique_ptr<transport::client> client_;
};

TEST_P(weight_sync_serve, pushed_weights_serve_what_a_fresh_load_computes_and_tokens_carry_the_version) {
  const std::string dir = write_perturbed(1.25f, std::string("fresh_") + precision_name(GetParam()));
  const auto old_ref = greedy_alone(*load(k_tiny_a, GetParam()), k_prompt, 6);
  const auto new_ref = greedy_alone(*load(dir, GetParam()), k_prompt, 6);
  ASSERT_NE(old_ref, new_ref) << "the perturbation must change the output";

  served before = generate(1, 6);
  EXPECT_EQ(before.tokens, old_ref.first);
  EXPECT_EQ(before.logprobs, old_ref.second);
  EXPECT_EQ(before.final_version, 0u);

  // Over three connections: buckets (and a tensor's chunks) arrive interleaved, the end may overtake them.
  auto r = push(dir, 1, 1 << 20, 3);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_GT(r->n_buckets, 3);
  EXPECT_EQ(serving_version(), 1u);
  served after = generate(2, 6);
  EXPECT_EQ(after.tokens, new_ref.first) << "bitwise equal to a fresh load of the pushed checkpoint";
  EXPECT_EQ(after.logprobs, new_ref.second);
  EXPECT_EQ(after.chunk_versions, std::vector<uint64_t>(6, 1));
  EXPECT_EQ(after.final_version, 1u);

  auto again = push(dir, 1);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.get_status().code(), status_code::failed_precondition) << again.get_status().to_string();
  auto stats = std::get<protocol::stats_reply>(control(protocol::control_verb::stats));
  EXPECT_NE(stats.prometheus.find("hart_weight_version 1"), std::string::npos) << stats.prometheus;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(precisions, weight_sync_serve, ::testing::Values(precision::exact, precision::fp8),
                         [](const auto& i) { return std::string(precision_name(i.param)); });

class weight_sync_faults : public weight_sync_serve {};

// A tensor said to be in CUDA memory that is host memory (or with no CUDA here)
// is refused by the client before anything is sent, whichever way it would go.
void expect_host_memory_as_device_refused(const std::string& endpoint, device_transport via) {
  weight_sync_client_params p;
  p.endpoint = endpoint;
  p.lanes = 1;
  p.device_via = via;
  auto c = weight_sync_client::connect(p);
  ASSERT_TRUE(c.ok()) << c.get_status().to_string();
  std::vector<float> host(2, 1.0f);
  tensor_ref t{"norm.weight", dtype::f32, {2}, host.data(), 8};
  t.device = true;
  auto r = (*c)->push(9, {t});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.get_status().code() == status_code::invalid_argument ||
              r.get_status().code() == status_code::unimplemented)
      << r.get_status().to_string();
}

// A raw DEALER on the weight-sync endpoint, for frames the client library never sends.
struct raw_sync {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  explicit raw_sync(const std::string& ep) {
    sock.set(zmq::sockopt::linger, 0);
    sock.connect(ep);
  }
  void send(const std::vector<std::vector<uint8_t>>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      (void)sock.send(zmq::buffer(frames[i]),
                      i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  void send(const weight_sync::sync_request& r, std::vector<std::vector<uint8_t>> data = {}) {
    auto h = weight_sync::request_header();
    std::vector<std::vector<uint8_t>> frames = {{h.begin(), h.end()}, *weight_sync::encode_request(r)};
    for (auto& d : data) frames.push_back(std::move(d));
    send(frames);
  }
  weight_sync::sync_reply receive() {
    zmq_pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(20000)), 1) << "no reply";
    std::vector<zmq::message_t> f;
    EXPECT_TRUE(zmq::recv_multipart(sock, std::back_inserter(f)));
    EXPECT_EQ(f.size(), 2u);
    auto r = weight_sync::decode_reply({f[0].data(), f[0].size()}, {f[1].data(), f[1].size()});
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    return r.ok() ? *r : weight_sync::sync_reply{};
  }
};

TEST_P(weight_sync_faults, broken_updates_get_typed_errors_and_the_old_weights_keep_serving) {
  const served base = generate(1, 5);
  raw_sync raw(srv_->weight_sync_endpoint());
  // Checksum mismatch.
  raw.send(weight_sync::begin_msg{3, 1, 8});
  EXPECT_TRUE(raw.receive().ok());
  raw.send(weight_sync::bucket_msg{3, 0, {{"norm.weight", dtype::f32, {2}, 0, 8}}},
           {std::vector<uint8_t>(8, 1)});
  raw.send(weight_sync::end_msg{3, 0x1234});
  auto e = raw.receive();
  EXPECT_EQ(e.code, status_code::data_loss) << e.message;
  EXPECT_EQ(e.phase, weight_sync::sync_phase::end);
  EXPECT_EQ(e.serving_version, 0u);
  // A valid transfer of an incomplete model: the loader names the missing tensor.
  const std::vector<uint8_t> one(8, 1);
  raw.send(weight_sync::begin_msg{3, 1, 8});
  EXPECT_TRUE(raw.receive().ok());
  raw.send(weight_sync::bucket_msg{3, 0, {{"norm.weight", dtype::f32, {2}, 0, 8}}}, {one});
  raw.send(weight_sync::end_msg{3, weight_sync::crc32c_extend(0, one.data(), 8)});
  e = raw.receive();
  EXPECT_EQ(e.code, status_code::not_found) << e.message;
  EXPECT_NE(e.message.find("lacks tensor"), std::string::npos) << e.message;
  // Two connections: the end (bucketCount 2) overtakes bucket 1, sent later on the other
  // connection with the tensor's first half: it waits for it, and the checksum is the
  // buckets' in seq order. The loader's not_found (not a count or checksum error) shows it.
  {
    raw_sync lane(srv_->weight_sync_endpoint());
    const std::vector<uint8_t> halves = {1, 2, 3, 4, 5, 6, 7, 8};
    raw.send(weight_sync::begin_msg{3, 1, 8});
    EXPECT_TRUE(raw.receive().ok());
    raw.send(weight_sync::bucket_msg{3, 0, {{"norm.weight", dtype::f32, {2}, 4, 4}}}, {{5, 6, 7, 8}});
    // Bucket 0's bytes, then bucket 1's.
    const uint32_t crc =
        weight_sync::crc32c_extend(weight_sync::crc32c_extend(0, halves.data() + 4, 4), halves.data(), 4);
    raw.send(weight_sync::end_msg{3, crc, 2});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    lane.send(weight_sync::bucket_msg{3, 1, {{"norm.weight", dtype::f32, {2}, 0, 4}}}, {{1, 2, 3, 4}});
    e = raw.receive();
    EXPECT_EQ(e.code, status_code::not_found) << e.message;
  }
  // Malformed frames: each gets a typed error and changes nothing.
  raw.send({{1, 3}, std::vector<uint8_t>(64, 0xff)});
  EXPECT_EQ(raw.receive().code, status_code::invalid_argument);
  raw.send({{1, 1}, std::vector<uint8_t>(16, 0)});
  e = raw.receive();
  EXPECT_EQ(e.code, status_code::invalid_argument);
  EXPECT_NE(e.message.find("kind"), std::string::npos) << e.message;
  raw.send({{1, 3}});
  EXPECT_EQ(raw.receive().code, status_code::invalid_argument);
  raw.send(weight_sync::bucket_msg{9, 0, {{"norm.weight", dtype::f32, {2}, 0, 8}}}, {one});
  EXPECT_EQ(raw.receive().code, status_code::failed_precondition) << "a bucket without begin";
  raw.send(weight_sync::bucket_msg{9, 0, {{"norm.weight", dtype::f32, {2}, 0, 8}}},
           {std::vector<uint8_t>(4)});
  EXPECT_EQ(raw.receive().code, status_code::invalid_argument) << "data frame shorter than its chunk";

  expect_host_memory_as_device_refused(srv_->weight_sync_endpoint(), device_transport::cuda_ipc);

  EXPECT_EQ(serving_version(), 0u);
  EXPECT_TRUE(std::get<protocol::health_reply>(control(protocol::control_verb::health)).ok);
  const served after = generate(2, 5);
  EXPECT_EQ(after.tokens, base.tokens);
  EXPECT_EQ(after.logprobs, base.logprobs) << "the old weights keep serving, bitwise";
}

// Updates by NCCL whose group cannot form. A server that cannot receive by
// NCCL refuses the begin (no NCCL in the build: unimplemented; no CUDA device:
// unavailable); one that can acks it, and as the trainer never joins (it died
// after sending the id) the first chunk fails once the idle timeout (3 s here)
// ends the wait, the group aborted. A begin reusing a group the server does not
// hold is not_found; a chunk by NCCL without a group is refused; a client asked
// for NCCL with host memory refuses before sending. The old weights keep serving.
TEST_P(weight_sync_faults,
       updates_by_nccl_whose_group_cannot_form_get_typed_errors_and_the_old_weights_keep_serving) {
  const served base = generate(1, 5);
  raw_sync raw(srv_->weight_sync_endpoint());
  // The server runs this build on this machine: what it can do, this process can.
  const status can = weight_sync::nccl_group::usable(0);
  std::vector<uint8_t> id(weight_sync::k_nccl_id_bytes, 0x5a);
  if (can.ok()) id = *weight_sync::nccl_group::new_id();  // a live group root that no rank 0 joins
  weight_sync::chunk_desc by_nccl{"norm.weight", dtype::f32, {2}, 0, 8};
  by_nccl.nccl = true;
  weight_sync::begin_msg b{3, 1, 8};
  b.nccl_id = id;
  raw.send(b);
  auto r = raw.receive();
  if (can.ok()) {
    EXPECT_TRUE(r.ok()) << r.message;
    const auto t0 = std::chrono::steady_clock::now();
    raw.send(weight_sync::bucket_msg{3, 0, {by_nccl}});
    r = raw.receive();
    EXPECT_EQ(r.code, status_code::unavailable) << r.message;
    EXPECT_EQ(r.phase, weight_sync::sync_phase::bucket);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s) << "it waited for the group: " << r.message;
  } else {
    EXPECT_EQ(r.code, can.code()) << r.message;
    EXPECT_EQ(r.phase, weight_sync::sync_phase::begin);
    EXPECT_NE(r.message.find("NCCL"), std::string::npos) << r.message;
  }
  raw.send(weight_sync::bucket_msg{3, 0, {by_nccl}});
  EXPECT_EQ(raw.receive().code, status_code::failed_precondition) << "the update is gone";
  b.nccl_reuse = true;
  raw.send(b);
  r = raw.receive();
  EXPECT_EQ(r.code, status_code::not_found) << r.message;
  raw.send(weight_sync::begin_msg{3, 1, 8});
  EXPECT_TRUE(raw.receive().ok());
  raw.send(weight_sync::bucket_msg{3, 0, {by_nccl}});
  r = raw.receive();
  EXPECT_EQ(r.code, status_code::failed_precondition) << r.message;
  EXPECT_NE(r.message.find("opened no NCCL group"), std::string::npos) << r.message;
  expect_host_memory_as_device_refused(srv_->weight_sync_endpoint(), device_transport::nccl);
  EXPECT_EQ(serving_version(), 0u);
  const served after = generate(2, 5);
  EXPECT_EQ(after.tokens, base.tokens);
  EXPECT_EQ(after.logprobs, base.logprobs) << "the old weights keep serving, bitwise";
}

TEST_P(weight_sync_faults, a_client_killed_mid_update_leaves_the_old_weights_and_the_next_update_succeeds) {
  const std::string dir = write_perturbed(0.8f, std::string("killed_") + precision_name(GetParam()));
  const served base = generate(1, 5);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    // A trainer that begins an update, sends part of it, and is killed.
    raw_sync raw(srv_->weight_sync_endpoint());
    raw.send(weight_sync::begin_msg{5, 305, 1 << 20});
    (void)raw.receive();
    raw.send(weight_sync::bucket_msg{5, 0, {{"norm.weight", dtype::f32, {128}, 0, 512}}},
             {std::vector<uint8_t>(512)});
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(serving_version(), 0u);
  const served mid = generate(2, 5);
  EXPECT_EQ(mid.tokens, base.tokens);
  EXPECT_EQ(mid.logprobs, base.logprobs);
  // The next full update replaces the orphaned staging; here through the CLI, as a user would.
  const std::string cmd = std::string(HART_BINARY) + " --log warn push-weights -m " + dir + " --endpoint " +
                          srv_->weight_sync_endpoint() + " --version 6 --bucket 256KiB";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(serving_version(), 6u);
  const auto ref = greedy_alone(*load(dir, GetParam()), k_prompt, 5);
  const served after = generate(3, 5);
  EXPECT_EQ(after.tokens, ref.first);
  EXPECT_EQ(after.logprobs, ref.second);
  fs::remove_all(dir);
}

TEST_P(weight_sync_faults, in_flight_requests_continue_across_an_in_place_update_with_the_new_version) {
  const std::string dir = write_perturbed(1.1f, std::string("inplace_") + precision_name(GetParam()));
  protocol::generate_request g;
  g.request_id = 9;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(k_prompt.begin(), k_prompt.end());
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = 120;
  g.sampling.ignore_eos = true;
  ASSERT_TRUE(client_->send(protocol::request{g}).ok());
  std::vector<uint64_t> versions;
  auto take = [&](const protocol::reply& r) {
    if (const auto* c = std::get_if<protocol::chunk_event>(&r)) versions.push_back(c->weight_version);
  };
  while (versions.size() < 2) {
    auto r = client_->receive(20s);
    ASSERT_TRUE(r.ok());
    take(*r);
  }
  // pause(in place) → push → resume, as an RL driver does between steps.
  protocol::control_request q{};
  q.tag = 5;
  q.verb = protocol::control_verb::pause;
  q.mode = protocol::pause_mode::in_place;
  ASSERT_TRUE(client_->send(protocol::request{q}).ok());
  protocol::final_event fin;
  bool paused = false, done = false;
  while (!paused) {
    auto r = client_->receive(20s);
    ASSERT_TRUE(r.ok());
    take(*r);
    paused = std::holds_alternative<protocol::ack_reply>(*r);
  }
  auto pushed = push(dir, 2);
  ASSERT_TRUE(pushed.ok()) << pushed.get_status().to_string();
  q.verb = protocol::control_verb::resume;
  ASSERT_TRUE(client_->send(protocol::request{q}).ok());
  while (!done) {
    auto r = client_->receive(20s);
    ASSERT_TRUE(r.ok());
    take(*r);
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      fin = *f;
      done = true;
    }
  }
  EXPECT_EQ(fin.reason, protocol::finish_reason::length) << "not aborted by the update";
  ASSERT_EQ(versions.size(), 120u);
  EXPECT_EQ(versions.front(), 0u);
  EXPECT_EQ(versions.back(), 2u);
  EXPECT_TRUE(std::is_sorted(versions.begin(), versions.end()));
  EXPECT_EQ(fin.weight_version, 2u);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(exact, weight_sync_faults, ::testing::Values(precision::exact),
                         [](const auto& i) { return std::string(precision_name(i.param)); });

TEST(weight_sync_client_params, a_reply_timeout_outside_1_ms_to_int_max_is_refused) {
  weight_sync_client_params p;
  p.endpoint = "tcp://127.0.0.1:1";
  for (const int64_t ms : {int64_t{0}, int64_t{-5}, int64_t{INT_MAX} + 1}) {
    p.reply_timeout = std::chrono::milliseconds(ms);
    EXPECT_EQ(p.validate().code(), status_code::invalid_argument) << ms;
  }
  p.reply_timeout = std::chrono::milliseconds(1);
  EXPECT_TRUE(p.validate().ok());
}

}  // namespace
}  // namespace hart::testing
