// Standalone benchmark for sparse_decode_attention_cuda (issue 6, target A1).
// Built without CMake by scripts/gpu/bench_sparse_decode_attention.sh:
//
//   sda_bench [peer.txt]     checks + timings + table
//   sda_bench --case I       case I alone (for ncu / nsys)
//
// For each case: random 584-byte entries encoded on the host (four input sets of
// >= 40 MB each, rotated so the KV is not L2-resident), random slots; the first
// queries are checked against sparse_decode_attention_cpu (no time printed for a
// failed case); then timed with CUDA events, eager (mean of 1000 calls) and as a
// CUDA graph of one call (mean of 1000 replays), after >= 300 ms of warm-up. The table comes last: floor =
// bytes moved / 4.15 TB/s, TFLOP/s = 4·B·H·n·512 / time, peer = a PyTorch eager
// implementation (bf16 gather + einsum + softmax with the sink) timed by the script.
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"
#include "kernels/testing/cuda_bench_util.h"
#include "kernels/testing/hot_bench_summary.h"
#include "runtime/core/codecs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace hart;

namespace {

constexpr double k_copy_bw = 4.15e12;
constexpr int k_sets = 4;
constexpr int64_t k_per_page = 64;
constexpr int64_t k_page_bytes = (k_per_page * kv_entry_bytes + 575) / 576 * 576;

struct bench_case {
  const char* name;
  int64_t batch, heads, n0, n1;
};

struct result {
  bench_case c;
  bool ok = false;
  double max_err = 0, us = 0, graph_us = 0;
};

std::vector<uint8_t> encode_pool(std::mt19937& rng, int64_t slots) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t pages = (slots + k_per_page - 1) / k_per_page;
  std::vector<uint8_t> pool(size_t(pages * k_page_bytes), 0);
  std::vector<float> v(kv_entry_dim);
  for (int64_t s = 0; s < slots; ++s) {
    for (float& x : v) x = nd(rng);
    (void)kv_entry_encode(v.data(),
                          pool.data() + (s / k_per_page) * k_page_bytes + (s % k_per_page) * kv_entry_bytes);
  }
  return pool;
}

result run_case(const bench_case& c, std::mt19937& rng, cudaStream_t stream) {
  result r{c};
  const int64_t H = c.heads, B = c.batch, D = kv_entry_dim;
  // Slots per set: enough distinct entries that every query reads its own (>= 40 MB a set).
  const int64_t slots = std::max<int64_t>(B * (c.n0 + c.n1), (40ll << 20) / kv_entry_bytes);
  std::vector<uint8_t*> d_pool(k_sets);
  std::vector<int32_t*> d_i0(k_sets), d_i1(k_sets);
  std::vector<uint16_t*> d_q(k_sets);
  std::vector<std::vector<uint8_t>> h_pool(k_sets);
  std::vector<std::vector<int32_t>> h_i0(k_sets), h_i1(k_sets);
  std::vector<std::vector<uint16_t>> h_q(k_sets);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(slots - 1));
  for (int s = 0; s < k_sets; ++s) {
    h_pool[s] = encode_pool(rng, slots);
    h_i0[s].resize(size_t(B * c.n0));
    h_i1[s].resize(size_t(B * c.n1));
    for (auto& x : h_i0[s]) x = pick(rng);
    for (auto& x : h_i1[s]) x = pick(rng);
    std::vector<float> qf(size_t(B * H * D));
    for (float& x : qf) x = nd(rng);
    h_q[s].resize(qf.size());
    f32_to_bf16(qf.data(), h_q[s].data(), int64_t(qf.size()));
    CK(cudaMalloc(&d_pool[s], h_pool[s].size()));
    CK(cudaMemcpy(d_pool[s], h_pool[s].data(), h_pool[s].size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_i0[s], std::max<size_t>(4, h_i0[s].size() * 4)));
    CK(cudaMemcpy(d_i0[s], h_i0[s].data(), h_i0[s].size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_i1[s], std::max<size_t>(4, h_i1[s].size() * 4)));
    CK(cudaMemcpy(d_i1[s], h_i1[s].data(), h_i1[s].size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_q[s], h_q[s].size() * 2));
    CK(cudaMemcpy(d_q[s], h_q[s].data(), h_q[s].size() * 2, cudaMemcpyHostToDevice));
  }
  std::vector<float> sink(static_cast<size_t>(H));
  for (float& x : sink) x = nd(rng);
  float* d_sink;
  CK(cudaMalloc(&d_sink, H * 4));
  CK(cudaMemcpy(d_sink, sink.data(), H * 4, cudaMemcpyHostToDevice));
  uint16_t* d_out;
  CK(cudaMalloc(&d_out, size_t(B * H * D) * 2));
  const size_t ws_bytes = sparse_decode_attention_workspace_bytes(B, H, c.n0, c.n1);
  void* d_ws;
  CK(cudaMalloc(&d_ws, ws_bytes));
  auto params = [&](int s, bool device) {
    sparse_decode_attention_params p;
    p.q = device ? d_q[s] : h_q[s].data();
    p.pool0 = {device ? d_pool[s] : h_pool[s].data(), k_per_page, k_page_bytes};
    p.pool1 = p.pool0;
    p.idx0 = device ? d_i0[s] : h_i0[s].data();
    p.n_idx0 = c.n0;
    p.idx1 = device ? d_i1[s] : h_i1[s].data();
    p.n_idx1 = c.n1;
    p.sink = device ? d_sink : sink.data();
    p.out = d_out;
    p.n_queries = B;
    p.n_heads = H;
    p.workspace = d_ws;
    p.workspace_bytes = ws_bytes;
    return p;
  };

  // Check: the first min(B, 2) queries of set 0 against the CPU reference.
  CK(cudaMemset(d_out, 0xff, size_t(B * H * D) * 2));
  const status st = sparse_decode_attention_cuda(params(0, true), stream);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name, st.to_string().c_str());
    return r;
  }
  CK(cudaStreamSynchronize(stream));
  const int64_t nq = std::min<int64_t>(B, 2);
  std::vector<uint16_t> got(size_t(nq * H * D)), want(got.size());
  CK(cudaMemcpy(got.data(), d_out, got.size() * 2, cudaMemcpyDeviceToHost));
  sparse_decode_attention_params hp = params(0, false);
  hp.n_queries = nq;
  hp.out = want.data();
  // The CPU reference reads idx rows with the batch's stride: keep only the first nq rows.
  if (!sparse_decode_attention_cpu(hp).ok()) return r;
  r.ok = true;
  for (int64_t row = 0; row < nq * H; ++row) {
    double mag = 0;
    for (int64_t d = 0; d < D; ++d) mag = std::max(mag, double(std::fabs(f32_from_bf16(want[row * D + d]))));
    for (int64_t d = 0; d < D; ++d) {
      const double g = f32_from_bf16(got[row * D + d]), w = f32_from_bf16(want[row * D + d]);
      const double err = std::fabs(g - w);
      r.max_err = std::max(r.max_err, err / std::max(mag, 1e-30));
      if (!(err <= 0x1p-7 * std::fabs(w) + 1e-5 * mag)) r.ok = false;
    }
  }
  if (!r.ok) return r;

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // Warm-up of >= 300 ms: an idle H200 sits at ~345 MHz and needs sustained work
  // to reach its boost clock (short runs measured 5x slow before this).
  float ms = 0;
  for (int round = 0; round < 100 && ms < 300.f; ++round) {
    CK(cudaEventRecord(e0, stream));
    for (int i = 0; i < 500; ++i) (void)sparse_decode_attention_cuda(params(i % k_sets, true), stream);
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float round_ms = 0;
    CK(cudaEventElapsedTime(&round_ms, e0, e1));
    ms += round_ms;
  }
  constexpr int n_iter = 1000;
  CK(cudaEventRecord(e0, stream));
  for (int i = 0; i < n_iter; ++i) (void)sparse_decode_attention_cuda(params(i % k_sets, true), stream);
  CK(cudaEventRecord(e1, stream));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  r.us = ms * 1000.0 / n_iter;

  // One graph per input set, each holding one call; replays rotate over them.
  std::vector<cudaGraphExec_t> execs(k_sets);
  for (int s = 0; s < k_sets; ++s) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const bool captured = sparse_decode_attention_cuda(params(s, true), stream).ok();
    CK(cudaStreamEndCapture(stream, &g));
    if (!captured) return r;
    CK(cudaGraphInstantiate(&execs[s], g, 0));
    CK(cudaGraphDestroy(g));
  }
  for (int i = 0; i < 200; ++i) CK(cudaGraphLaunch(execs[i % k_sets], stream));
  CK(cudaEventRecord(e0, stream));
  for (int i = 0; i < n_iter; ++i) CK(cudaGraphLaunch(execs[i % k_sets], stream));
  CK(cudaEventRecord(e1, stream));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  r.graph_us = ms * 1000.0 / n_iter;
  for (auto ex : execs) cudaGraphExecDestroy(ex);
  for (int s = 0; s < k_sets; ++s) {
    cudaFree(d_pool[s]);
    cudaFree(d_i0[s]);
    cudaFree(d_i1[s]);
    cudaFree(d_q[s]);
  }
  cudaFree(d_sink);
  cudaFree(d_out);
  cudaFree(d_ws);
  return r;
}

}  // namespace

int sparse_decode_attention_bench_main(int argc, char** argv) {
  std::map<std::tuple<long long, long long, long long>, double> peer;  // (B, H, n) → us
  int only = -1;
  if (argc == 3 && std::strcmp(argv[1], "--case") == 0) {
    only = std::atoi(argv[2]);
  } else if (argc > 1) {
    if (FILE* f = std::fopen(argv[1], "r")) {
      long long b, h, n;
      double us;
      while (std::fscanf(f, "%lld %lld %lld %lf", &b, &h, &n, &us) == 4) peer[{b, h, n}] = us;
      std::fclose(f);
    }
  }
  const bench_case cases[] = {
      {"Flash CSA", 1, 64, 128, 512},     {"Flash CSA", 8, 64, 128, 512},
      {"Flash CSA", 32, 64, 128, 512},    {"Flash CSA", 128, 64, 128, 512},
      {"Pro CSA", 1, 128, 128, 1024},     {"Pro CSA", 128, 128, 128, 1024},
      {"Flash HCA 4K", 1, 64, 128, 32},   {"Flash HCA 256K", 1, 64, 128, 2048},
      {"Flash HCA 1M", 1, 64, 128, 8192}, {"Flash SWA only", 1, 64, 128, 0},
  };
  std::mt19937 rng(12345);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  std::vector<result> results;
  for (int i = 0; i < int(sizeof(cases) / sizeof(cases[0])); ++i) {
    const bench_case& c = cases[i];
    if (only >= 0 && i != only) continue;
    results.push_back(run_case(c, rng, stream));
    std::fprintf(stderr, "done %s B=%lld\n", c.name, (long long)c.batch);
  }
  std::printf(
      "\n| case | batch | heads | entries | check (max err / row max) | eager us | graph us | floor us | "
      "TFLOP/s | torch eager us |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const result& r : results) {
    const bench_case& c = r.c;
    const int64_t n = c.n0 + c.n1;
    const double bytes = double(c.batch) * (n * (kv_entry_bytes + 4) + 2.0 * c.heads * kv_entry_dim * 2);
    const double floor_us = bytes / k_copy_bw * 1e6;
    const double flops = 4.0 * c.batch * c.heads * n * kv_entry_dim;
    const auto it = peer.find({c.batch, c.heads, n});
    char peer_s[32] = "-";
    if (it != peer.end()) std::snprintf(peer_s, sizeof peer_s, "%.1f", it->second);
    hart::bench::summary().push_back({"A1 sparse decode attention",
                                      std::string(c.name) + ", batch " + std::to_string(c.batch) + ", " +
                                          std::to_string(c.heads) + " heads, " + std::to_string(n) +
                                          " entries",
                                      r.us, floor_us, "PyTorch eager", peer_s, r.ok});
    if (!r.ok) {
      std::printf("| %s | %lld | %lld | %lld | FAILED (%.2e) | - | - | %.2f | - | %s |\n", c.name,
                  (long long)c.batch, (long long)c.heads, (long long)n, r.max_err, floor_us, peer_s);
      continue;
    }
    std::printf("| %s | %lld | %lld | %lld | ok (%.1e) | %.2f | %.2f | %.2f | %.1f | %s |\n", c.name,
                (long long)c.batch, (long long)c.heads, (long long)n, r.max_err, r.us, r.graph_us, floor_us,
                flops / (r.graph_us * 1e-6) / 1e12, peer_s);
  }
  return 0;
}

#ifndef HART_HOT_KERNELS_BENCH
int main(int argc, char** argv) {
  return sparse_decode_attention_bench_main(argc, argv);
}
#endif
