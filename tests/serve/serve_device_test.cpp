// `hart serve --device`: on a CUDA device (tests skip without one), a real
// `hart serve --device cuda` on tiny-a gives the greedy tokens of
// `hart serve --device cpu` token for token (exact mode), for concurrent
// requests, repeated prompts served from the prefix cache and a follow-up
// turn that extends an earlier one, in process and with --worker-process; and
// weights pushed into `hart serve --device cuda --weight-sync-endpoint` serve
// what a fresh `hart serve --device cuda` on the pushed checkpoint serves (over
// the socket, by CUDA IPC, and by NCCL broadcast from a second GPU).
// Without a device (or without CUDA) `--device cuda` fails at startup with a
// clear error and exit code 1; an unknown device is refused as usage. Prompt
// log-probs (scoring) on the device equal the CPU server's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#ifdef HART_CUDA
#include "kernels/testing/cuda_test_util.h"
#endif
#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"
#include "runtime/core/codecs.h"
#include "runtime/model/safetensors.h"
#include "runtime/transport/client.h"
#include "runtime/weight_sync/nccl_group.h"
#include "tests/command_run.h"
#include "tests/serve/perturbed_checkpoint.h"
#include "tests/serve/server_process.h"

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

bool device_present() {
#ifdef HART_CUDA
  return cuda_device_available();
#else
  return false;
#endif
}

std::string tiny_a() {
  return std::string(HART_TEST_DATA) + "/tiny-a";
}

using run_result = command_result;

// `timeout` keeps a command that wrongly starts serving from hanging the test (it then exits 124).
run_result run(const std::string& args) {
  return command_run("timeout 120 " + std::string(HART_BINARY) + " --log warn " + args);
}

TEST(serve_device, cuda_without_a_device_fails_at_startup_with_a_clear_error) {
  if (device_present()) GTEST_SKIP() << "a CUDA device is present: the no-device error cannot occur here";
#ifdef HART_CUDA
  const std::string want = "hart: error: failed_precondition: --device cuda: no CUDA device is visible";
#else
  const std::string want =
      "hart: error: failed_precondition: --device cuda: this hart was built without CUDA";
#endif
  for (const std::string& cmd :
       {"serve -m " + tiny_a() + " --device cuda --bind tcp://127.0.0.1:*",
        "serve -m " + tiny_a() + " --device cuda --worker-process --bind tcp://127.0.0.1:*",
        "worker -m " + tiny_a() + " --device cuda --connect tcp://127.0.0.1:9"}) {
    const run_result r = run(cmd);
    EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("hart: serving"), std::string::npos) << cmd << "\n" << r.out;
  }
}

TEST(serve_device, weight_sync_with_a_worker_process_is_refused) {
  // Checked before the device: the same answer with and without one.
  const run_result r = run(
      "serve -m " + tiny_a() +
      " --device cuda --worker-process --weight-sync-endpoint tcp://127.0.0.1:* --bind tcp://127.0.0.1:*");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("hart: error: unimplemented: --weight-sync-endpoint with --worker-process"),
            std::string::npos)
      << r.out;
}

TEST(serve_device, unknown_device_is_refused) {
  for (const std::string& cmd : {"serve -m " + tiny_a() + " --device foo --bind tcp://127.0.0.1:*",
                                 "worker -m " + tiny_a() + " --device foo --connect tcp://127.0.0.1:9"}) {
    const run_result r = run(cmd);
    EXPECT_NE(r.exit_code, 0) << cmd << "\n" << r.out;
    EXPECT_NE(r.exit_code, 124) << cmd << ": it started instead of refusing\n" << r.out;
    EXPECT_NE(r.out.find("--device: foo not in {cpu,cuda}"), std::string::npos) << cmd << "\n" << r.out;
  }
}

// -- the GPU server against the CPU server ---

struct answer {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;
  uint32_t cached = 0;
  std::string error;
};

std::vector<int32_t> prompt_of(int i) {
  // Even prompts share their first 140 tokens (more than one 128-token page)
  // with each other; every prompt fills at least one page, so its repeat can hit.
  std::vector<int32_t> p;
  const int n = 140 + (i * 53) % 260;
  for (int k = 0; k < n; ++k) {
    const int salt = (i % 2 == 0 && k < 140) ? 0 : i + 1;
    p.push_back(int32_t((k * 31 + salt * 17 + k * salt) % 500 + 6));
  }
  return p;
}

protocol::generate_request greedy(uint64_t id, const std::vector<int32_t>& prompt, uint32_t n_new) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(prompt.begin(), prompt.end());
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = n_new;
  g.sampling.ignore_eos = true;
  g.sampling.logprobs = true;
  return g;
}

answer ask(const std::string& endpoint, uint64_t id, const std::vector<int32_t>& prompt, uint32_t n_new) {
  answer a;
  transport::client_params p;
  p.endpoint = endpoint;
  auto c = transport::client::connect(p);
  if (!c.ok()) return {{}, {}, 0, c.get_status().to_string()};
  auto r = (*c)->generate(greedy(id, prompt, n_new), 300s);
  if (!r.ok()) return {{}, {}, 0, r.get_status().to_string()};
  const transport::sample_output& s = r->samples[0];
  a.tokens = s.token_ids;
  a.logprobs = s.logprobs;
  a.cached = s.final.usage.cached_tokens;
  return a;
}

constexpr int k_concurrent = 8;
constexpr uint32_t k_new = 16;

// The workload: k_concurrent requests at once, then the first four prompts
// again (prefix-cache hits), then a second turn of prompt 1 that extends its
// prompt with its answer and more tokens.
std::vector<answer> workload(const std::string& endpoint) {
  std::vector<answer> out(k_concurrent + 5);
  std::vector<std::thread> threads;
  for (int i = 0; i < k_concurrent; ++i) {
    threads.emplace_back([&, i] { out[i] = ask(endpoint, 100 + i, prompt_of(i), k_new); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) out[k_concurrent + i] = ask(endpoint, 200 + i, prompt_of(i), k_new);
  std::vector<int32_t> turn2 = prompt_of(1);
  turn2.insert(turn2.end(), out[1].tokens.begin(), out[1].tokens.end());
  for (int k = 0; k < 30; ++k) turn2.push_back(int32_t(7 + k * 13 % 400));
  out[k_concurrent + 4] = ask(endpoint, 300, turn2, k_new);
  return out;
}

void expect_same_greedy(const std::vector<answer>& cpu, const std::vector<answer>& gpu, const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].error, "") << "cpu request " << i;
    ASSERT_EQ(gpu[i].error, "") << what << " request " << i;
    EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << what << " request " << i;
    ASSERT_EQ(gpu[i].logprobs.size(), cpu[i].logprobs.size()) << what << " request " << i;
    for (size_t j = 0; j < cpu[i].logprobs.size(); ++j) {
      EXPECT_NEAR(gpu[i].logprobs[j], cpu[i].logprobs[j], 1e-3) << what << " request " << i << " token " << j;
    }
    // The concurrent ones race for the shared prefix; the later ones run alone.
    if (i >= size_t(k_concurrent)) {
      EXPECT_EQ(gpu[i].cached, cpu[i].cached) << what << " request " << i;
    }
  }
  // The repeats were served from the prefix cache and answered as the first time.
  for (int i = 0; i < 4; ++i) {
    const answer& again = gpu[k_concurrent + i];
    EXPECT_GE(again.cached, 128u) << what << ": repeat of prompt " << i << " missed the prefix cache";
    EXPECT_EQ(again.tokens, gpu[i].tokens) << what << ": repeat of prompt " << i;
  }
  EXPECT_GE(gpu[k_concurrent + 4].cached, 128u) << what << ": the second turn missed the prefix cache";
}

const std::vector<std::string> k_pool = {"--page-size", "128", "--full-pages", "64", "--swa-pages", "24"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(serve_device_gpu, greedy_outputs_equal_the_cpu_server_with_prefix_hits_and_concurrency) {
  if (!device_present())
    GTEST_SKIP() << "no CUDA device: hart serve --device cuda not checked on this machine";
  std::vector<answer> cpu, gpu, gpu_worker;
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cpu"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the CPU server did not start";
    cpu = workload(srv.endpoint());
  }
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cuda"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server did not start";
    gpu = workload(srv.endpoint());
  }
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cuda", "--worker-process"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server with a worker process did not start";
    gpu_worker = workload(srv.endpoint());
  }
  expect_same_greedy(cpu, gpu, "cuda");
  expect_same_greedy(cpu, gpu_worker, "cuda --worker-process");
}

// Pages left to the memory plan (no --full-pages / --swa-pages): the pool takes what 0.9 of the
// device leaves, and the answers are the fixed pool's; dummy weights made on the device serve.
TEST(serve_device_gpu, pages_from_the_memory_plan_and_dummy_weights_serve) {
  if (!device_present())
    GTEST_SKIP() << "no CUDA device: hart serve --device cuda not checked on this machine";
  std::vector<answer> fixed, planned;
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cuda"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server did not start";
    fixed = workload(srv.endpoint());
  }
  {
    server_process srv(tiny_a(), {"--page-size", "128", "--device", "cuda", "--max-running", "8"}, false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server with planned pages did not start";
    planned = workload(srv.endpoint());
  }
  expect_same_greedy(fixed, planned, "cuda, planned pages");
  {
    server_process srv(tiny_a(), {"--device", "cuda", "--load-format", "dummy", "--num-layers", "2"}, false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server on dummy weights did not start";
    const answer a = ask(srv.endpoint(), 1, prompt_of(0), 8);
    EXPECT_EQ(a.error, "");
    EXPECT_EQ(a.tokens.size(), 8u);
  }
}

// Prompt log-probs (scoring, logprobStartLen): every prompt position's log-prob of the next token,
// computed on the device, equals the CPU server's; scored alone, next to generating requests, and
// from a later start with tokens generated after it.
struct scored {
  std::vector<float> input;
  std::vector<uint32_t> tokens;
  std::string error;
};

scored score(const std::string& endpoint, uint64_t id, const std::vector<int32_t>& prompt, int64_t from,
             uint32_t n_new) {
  transport::client_params p;
  p.endpoint = endpoint;
  auto c = transport::client::connect(p);
  if (!c.ok()) return {{}, {}, c.get_status().to_string()};
  protocol::generate_request g = greedy(id, prompt, n_new);
  g.logprob_start = from;
  auto r = (*c)->generate(g, 300s);
  if (!r.ok()) return {{}, {}, r.get_status().to_string()};
  return {r->samples[0].final.input_logprobs, r->samples[0].token_ids, ""};
}

std::vector<scored> scoring_workload(const std::string& endpoint) {
  std::vector<scored> out(6);
  std::vector<std::thread> threads;
  // Two scored prompts next to two generating ones (mixed steps), then a repeat and a tail start.
  threads.emplace_back([&] { out[0] = score(endpoint, 1, prompt_of(0), 0, 0); });
  threads.emplace_back([&] { out[1] = score(endpoint, 2, prompt_of(3), 0, 0); });
  threads.emplace_back([&] { out[2].tokens = ask(endpoint, 3, prompt_of(5), k_new).tokens; });
  threads.emplace_back([&] { out[3].tokens = ask(endpoint, 4, prompt_of(6), k_new).tokens; });
  for (auto& t : threads) t.join();
  out[4] = score(endpoint, 5, prompt_of(0), 0, 0);  // its pages are cached; scoring computes it again
  out[5] = score(endpoint, 6, prompt_of(7), 100, 4);
  return out;
}

TEST(serve_device_gpu, prompt_logprobs_equal_the_cpu_server) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device: prompt log-probs on --device cuda not checked here";
  std::vector<scored> cpu, gpu;
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cpu"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the CPU server did not start";
    cpu = scoring_workload(srv.endpoint());
  }
  {
    server_process srv(tiny_a(), with(k_pool, {"--device", "cuda"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server did not start";
    gpu = scoring_workload(srv.endpoint());
  }
  const std::vector<size_t> n_scored = {prompt_of(0).size(), prompt_of(3).size(),      0, 0,
                                        prompt_of(0).size(), prompt_of(7).size() - 100};
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].error, "") << "cpu request " << i;
    ASSERT_EQ(gpu[i].error, "") << "cuda request " << i;
    EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "request " << i;
    ASSERT_EQ(cpu[i].input.size(), n_scored[i]) << "request " << i;
    ASSERT_EQ(gpu[i].input.size(), n_scored[i]) << "request " << i;
    for (size_t k = 0; k < n_scored[i]; ++k) {
      if (k == 0 && i != 5) {
        EXPECT_TRUE(std::isnan(gpu[i].input[k])) << "request " << i << ": nothing predicts position 0";
        continue;
      }
      EXPECT_NEAR(gpu[i].input[k], cpu[i].input[k], 1e-3) << "request " << i << " position " << k;
    }
  }
}

TEST(serve_device_gpu, a_plan_that_cannot_fit_is_refused_at_startup_with_the_numbers) {
  if (!device_present())
    GTEST_SKIP() << "no CUDA device: hart serve --device cuda not checked on this machine";
  const run_result r =
      run("serve -m " + tiny_a() + " --device cuda --max-running 100000000 --bind tcp://127.0.0.1:*");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("resource_exhausted: memory plan: one sequence of --max-context"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--max-running 100000000"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hart: serving"), std::string::npos) << r.out;
}

// -- weight sync into the GPU server ---

namespace fs = std::filesystem;

// One request at a time, so both servers see the same steps: four prompts,
// two repeats (prefix-cache hits), a second turn extending prompt 1.
std::vector<answer> sequential_workload(const std::string& endpoint) {
  std::vector<answer> out;
  for (int i = 0; i < 4; ++i) out.push_back(ask(endpoint, 400 + i, prompt_of(i), k_new));
  for (int i = 0; i < 2; ++i) out.push_back(ask(endpoint, 500 + i, prompt_of(i), k_new));
  std::vector<int32_t> turn2 = prompt_of(1);
  turn2.insert(turn2.end(), out[1].tokens.begin(), out[1].tokens.end());
  for (int k = 0; k < 30; ++k) turn2.push_back(int32_t(7 + k * 13 % 400));
  out.push_back(ask(endpoint, 600, turn2, k_new));
  return out;
}

// A perturbed tiny-a pushed by `push(weight sync endpoint, checkpoint dir)`
// into hart serve --device cuda after a workload on the old weights serves
// what a fresh GPU server on the perturbed checkpoint serves, bit for bit.
void expect_pushed_weights_serve_a_fresh_load(
    const std::string& tag, const std::function<void(const std::string&, const std::string&)>& push) {
  const std::string dir = testing::write_perturbed_checkpoint(tiny_a(), 1.25f, tag);
  std::vector<answer> before, pushed, fresh;
  {
    server_process srv(
        tiny_a(), with(k_pool, {"--device", "cuda", "--weight-sync-endpoint", "tcp://127.0.0.1:*"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the GPU server did not start";
    ASSERT_FALSE(srv.weight_sync_endpoint().empty()) << "no weight sync endpoint printed";
    before = sequential_workload(srv.endpoint());  // fills the prefix cache with the old weights' KV
    push(srv.weight_sync_endpoint(), dir);
    if (::testing::Test::HasFatalFailure()) return;
    pushed = sequential_workload(srv.endpoint());
  }
  {
    server_process srv(dir, with(k_pool, {"--device", "cuda"}), false);
    ASSERT_FALSE(srv.endpoint().empty()) << "the fresh GPU server on the pushed checkpoint did not start";
    fresh = sequential_workload(srv.endpoint());
  }
  ASSERT_EQ(pushed.size(), fresh.size());
  bool changed = false;
  for (size_t i = 0; i < fresh.size(); ++i) {
    ASSERT_EQ(before[i].error, "") << "request " << i << " before the push";
    ASSERT_EQ(pushed[i].error, "") << "request " << i << " after the push";
    ASSERT_EQ(fresh[i].error, "") << "request " << i << " on the fresh server";
    // Exact: the pushed device weights are a fresh load's bit for bit, and the steps are the same.
    EXPECT_EQ(pushed[i].tokens, fresh[i].tokens) << "request " << i;
    EXPECT_EQ(pushed[i].logprobs, fresh[i].logprobs) << "request " << i;
    EXPECT_EQ(pushed[i].cached, fresh[i].cached) << "request " << i << ": the swap flushes the prefix cache";
    changed = changed || before[i].tokens != pushed[i].tokens;
  }
  EXPECT_TRUE(changed) << "the perturbation must change the output";
  fs::remove_all(dir);
}

TEST(serve_device_gpu, pushed_weights_serve_what_a_fresh_gpu_server_on_them_serves) {
  if (!device_present())
    GTEST_SKIP() << "no CUDA device: weight sync into hart serve --device cuda not checked here";
  expect_pushed_weights_serve_a_fresh_load(
      "gpu_wsync", [](const std::string& endpoint, const std::string& dir) {
        const std::string cmd = std::string(HART_BINARY) + " --log warn push-weights -m " + dir +
                                " --endpoint " + endpoint + " --version 3 --bucket 256KiB";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      });
}

#ifdef HART_CUDA
// The checkpoint in `dir` copied into one cudaMalloc'd buffer of the current
// device (*buf) at 256-byte offsets, none at its start (offsets are
// exercised); empty if CUDA fails.
std::vector<tensor_ref> checkpoint_on_device(const std::string& dir, void** buf) {
  auto host = checkpoint_tensors_open(dir);
  EXPECT_TRUE(host.ok()) << host.get_status().to_string();
  if (!host.ok()) return {};
  size_t total = 256;
  for (const tensor_ref& t : host->tensors) total += (t.n_bytes + 255) / 256 * 256;
  if (cudaMalloc(buf, total) != cudaSuccess) return {};
  std::vector<tensor_ref> on_device;
  size_t off = 256;
  for (const tensor_ref& t : host->tensors) {
    if (cudaMemcpy(static_cast<char*>(*buf) + off, t.data, t.n_bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      return {};
    tensor_ref d = t;
    d.data = static_cast<char*>(*buf) + off;
    d.device = true;
    on_device.push_back(d);
    off += (t.n_bytes + 255) / 256 * 256;
  }
  return on_device;
}

// The same update from this process's CUDA memory (a colocated trainer),
// pushed as IPC references in 64 KiB buckets; the server copies them out of it.
TEST(serve_device_gpu, weights_pushed_from_cuda_memory_serve_what_a_fresh_gpu_server_on_them_serves) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device: weight sync from CUDA memory not checked here";
  expect_pushed_weights_serve_a_fresh_load(
      "gpu_wsync_ipc", [](const std::string& endpoint, const std::string& dir) {
        void* buf = nullptr;
        const std::vector<tensor_ref> on_device = checkpoint_on_device(dir, &buf);
        ASSERT_FALSE(on_device.empty()) << "copying the checkpoint to the device failed";
        weight_sync_client_params p;
        p.endpoint = endpoint;
        p.bucket_bytes = 64 << 10;
        p.lanes = 1;
        auto c = weight_sync_client::connect(p);
        ASSERT_TRUE(c.ok()) << c.get_status().to_string();
        auto r = (*c)->push(3, on_device);
        cudaFree(buf);
        ASSERT_TRUE(r.ok()) << r.get_status().to_string();
        EXPECT_GT(r->n_buckets, 1);
      });
}

// The update broadcast by NCCL from another GPU: this process is the trainer on
// GPU 1, hart serve runs on GPU 0. Two pushes through one client, in 64 KiB
// buckets: tiny-a itself as version 2 forms the NCCL group, the perturbed
// checkpoint as version 3 reuses it; what then serves is what a fresh GPU
// server on the perturbed checkpoint serves, bit for bit.
TEST(serve_device_gpu,
     weights_broadcast_by_nccl_from_another_gpu_serve_what_a_fresh_gpu_server_on_them_serves) {
  int n_devices = 0;
  if (cudaGetDeviceCount(&n_devices) != cudaSuccess) n_devices = 0;
  if (n_devices < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices (" << n_devices
                 << " here): weight sync by NCCL from another GPU not checked";
  }
  if (const status s = weight_sync::nccl_group::usable(1); !s.ok()) GTEST_SKIP() << s.to_string();
  expect_pushed_weights_serve_a_fresh_load("gpu_wsync_nccl", [](const std::string& endpoint,
                                                                const std::string& dir) {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    void* buf_a = nullptr;
    void* buf_b = nullptr;
    const std::vector<tensor_ref> original = checkpoint_on_device(tiny_a(), &buf_a);
    const std::vector<tensor_ref> perturbed = checkpoint_on_device(dir, &buf_b);
    ASSERT_FALSE(original.empty() || perturbed.empty()) << "copying the checkpoints to GPU 1 failed";
    weight_sync_client_params p;
    p.endpoint = endpoint;
    p.bucket_bytes = 64 << 10;
    p.device_via = device_transport::nccl;
    p.reply_timeout = 120s;  // also bounds forming the group and each broadcast
    auto c = weight_sync_client::connect(p);
    ASSERT_TRUE(c.ok()) << c.get_status().to_string();
    for (const auto& [version, tensors] :
         {std::pair{uint64_t(2), &original}, std::pair{uint64_t(3), &perturbed}}) {
      std::printf("[nccl] push of version %llu from GPU 1 into hart serve on GPU 0 (%s the NCCL group) ...\n",
                  (unsigned long long)version, version == 2 ? "forms" : "reuses");
      std::fflush(stdout);
      auto r = (*c)->push(version, *tensors);
      ASSERT_TRUE(r.ok()) << "push of version " << version << ": " << r.get_status().to_string();
      std::printf("[nccl]   %.3f MB in %lld buckets, transfer %.3f s, build %.3f s, swap %.3f s, group %s\n",
                  double(r->n_bytes) * 1e-6, (long long)r->n_buckets, r->transfer_s, r->build_s, r->swap_s,
                  r->nccl_group_formed ? "formed" : "reused");
      std::fflush(stdout);
      EXPECT_GT(r->n_buckets, 1);
      EXPECT_EQ(r->nccl_group_formed, version == 2) << "the first push forms the group, the second reuses it";
      EXPECT_EQ(r->crc32c, 0u) << "every byte went by NCCL, none over the socket";
    }
    std::printf("[nccl] now comparing what serves with a fresh GPU server on the pushed checkpoint\n");
    cudaFree(buf_a);
    cudaFree(buf_b);
  });
}
#endif

// --deterministic on the device: the concurrent workload (prompts batched
// together, prefix-cache repeats, a second turn) answers every prompt with the
// same tokens and bitwise the same log-probs as one request at a time.
TEST(serve_device_gpu, deterministic_answers_do_not_depend_on_batching) {
  if (!device_present())
    GTEST_SKIP() << "no CUDA device: hart serve --device cuda not checked on this machine";
  for (const char* prec : {"exact", "fp8"}) {
    SCOPED_TRACE(prec);
    std::vector<answer> batched, alone;
    {
      server_process srv(tiny_a(), with(k_pool, {"--device", "cuda", "--deterministic", "--precision", prec}),
                         false);
      ASSERT_FALSE(srv.endpoint().empty()) << "the deterministic GPU server did not start";
      batched = workload(srv.endpoint());
    }
    {
      server_process srv(tiny_a(), with(k_pool, {"--device", "cuda", "--deterministic", "--precision", prec}),
                         false);
      ASSERT_FALSE(srv.endpoint().empty()) << "the deterministic GPU server did not start";
      for (int i = 0; i < k_concurrent; ++i)
        alone.push_back(ask(srv.endpoint(), 700 + i, prompt_of(i), k_new));
    }
    for (int i = 0; i < k_concurrent; ++i) {
      ASSERT_EQ(batched[i].error, "") << "request " << i;
      ASSERT_EQ(alone[i].error, "") << "request " << i;
      EXPECT_EQ(batched[i].tokens, alone[i].tokens) << "prompt " << i;
      EXPECT_EQ(batched[i].logprobs, alone[i].logprobs)
          << "prompt " << i << ": log-probs differ batched vs alone";
    }
    for (int i = 0; i < 4; ++i) {  // the repeats, served from the prefix cache
      EXPECT_EQ(batched[k_concurrent + i].logprobs, alone[i].logprobs)
          << "prefix-cache repeat of prompt " << i;
    }
  }
}

}  // namespace
}  // namespace hart::testing
