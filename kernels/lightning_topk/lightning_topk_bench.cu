// Standalone benchmark for lightning_topk_cuda (issue 6, target T1). Built without
// CMake by scripts/gpu/bench_lightning_topk.sh (the GPU image lacks GTest/OpenBLAS):
//
//   lt_bench [peer.txt]      checks + timings + table
//   lt_bench --eval-only     the adversarial checks alone (for compute-sanitizer)
//   lt_bench --profile B N K 10 launches of one case (for ncu)
//
// 1. Runs every eval case of lightning_topk_cases.h (adversarial rows) on the GPU and
//    compares with lightning_topk_cpu exactly (indices and order; output poisoned).
// 2. For each perf case, draws fresh random rows on the device, checks the first and
//    last input set against the CPU reference (no time is printed for a failed case),
//    then times with CUDA events: per launch (median of >= 300, inputs rotated over
//    sets totalling >= 192 MB, i.e. > 3x the 60 MB L2, a spin kernel queued first so
//    launches never wait on the host) and per call inside a CUDA graph replay.
// 3. Prints a table last: floor = bytes read / 4.15 TB/s + the measured empty-kernel
//    launch time; peer = torch.topk timed by the script in the same device call.
#include "kernels/lightning_topk/lightning_topk.h"
#include "kernels/lightning_topk/lightning_topk_cases.h"
#include "kernels/testing/cuda_bench_util.h"
#include "kernels/testing/hot_bench_summary.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace hart;

namespace {

constexpr double k_copy_bw = 4.15e12;  // measured D2D copy bandwidth (perf-targets.md)

using hart::bench::hash32;

// Normal(0,1) scores by Box-Muller from a counter hash: fresh inputs per (seed, i).
__global__ void fill_normal(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = (seed << 40) ^ uint64_t(i) * 0x9e3779b97f4a7c15ull;
    const float u1 = (hash32(h) + 1.0f) * 2.3283064e-10f;  // (0, 1]
    const float u2 = hash32(h + 0x1234567ull) * 2.3283064e-10f;
    x[i] = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
  }
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void empty_kernel() {}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

bool same(const std::vector<int32_t>& a, const std::vector<int32_t>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = "size";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "slot %zu: got %d want %d", i, a[i], b[i]);
      *why = buf;
      return false;
    }
  }
  return true;
}

bool run_eval_case(const lt_cases::lt_case& c) {
  std::vector<int32_t> want(size_t(c.batch * c.k));
  if (!lightning_topk_cpu(
           c.params(c.scores.data() + c.scores_offset, c.lengths.data(), c.page_table.data(), want.data()))
           .ok())
    return false;
  float* d_s;
  int32_t *d_len, *d_pt, *d_out;
  const size_t n_out = want.size();
  CK(cudaMalloc(&d_s, c.scores.size() * sizeof(float)));
  CK(cudaMalloc(&d_len, c.lengths.size() * sizeof(int32_t)));
  CK(cudaMalloc(&d_pt, (c.page_table.size() + 1) * sizeof(int32_t)));
  CK(cudaMalloc(&d_out, n_out * sizeof(int32_t)));
  CK(cudaMemcpy(d_s, c.scores.data(), c.scores.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_len, c.lengths.data(), c.lengths.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (!c.page_table.empty()) {
    CK(cudaMemcpy(d_pt, c.page_table.data(), c.page_table.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  bool ok = true;
  std::string why;
  for (int rep = 0; rep < 2 && ok; ++rep) {
    CK(cudaMemset(d_out, 0x7f, n_out * sizeof(int32_t)));
    const status st = lightning_topk_cuda(c.params(d_s + c.scores_offset, d_len, d_pt, d_out), nullptr);
    if (!st.ok()) {
      why = st.to_string();
      ok = false;
      break;
    }
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> got(n_out);
    CK(cudaMemcpy(got.data(), d_out, n_out * sizeof(int32_t), cudaMemcpyDeviceToHost));
    ok = same(got, want, &why);
  }
  std::printf("check %-24s batch=%-3lld stride=%-8lld k=%-5lld %s %s\n", c.name.c_str(), (long long)c.batch,
              (long long)c.row_stride, (long long)c.k, ok ? "PASS" : "FAIL", ok ? "" : why.c_str());
  CK(cudaFree(d_s));
  CK(cudaFree(d_len));
  CK(cudaFree(d_pt));
  CK(cudaFree(d_out));
  return ok;
}

struct perf_row {
  int64_t batch, n, k;
  bool ok;
  double us, graph_us, floor_us;
};

// Checks set `s` of a perf case: device output vs lightning_topk_cpu on the same rows.
bool check_set(const float* d_set, const int32_t* d_len, int32_t* d_out, int64_t batch, int64_t n, int64_t k,
               bool run) {
  const size_t n_out = size_t(batch * k);
  if (run) {
    CK(cudaMemset(d_out, 0x7f, n_out * sizeof(int32_t)));
    lightning_topk_params p;
    p.scores = d_set;
    p.lengths = d_len;
    p.out = d_out;
    p.batch = batch;
    p.row_stride = n;
    p.k = k;
    if (!lightning_topk_cuda(p, nullptr).ok()) return false;
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> h(size_t(batch * n));
  std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(n)), got(n_out), want(n_out);
  CK(cudaMemcpy(h.data(), d_set, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got.data(), d_out, n_out * sizeof(int32_t), cudaMemcpyDeviceToHost));
  lightning_topk_params p;
  p.scores = h.data();
  p.lengths = lens.data();
  p.out = want.data();
  p.batch = batch;
  p.row_stride = n;
  p.k = k;
  if (!lightning_topk_cpu(p).ok()) return false;
  std::string why;
  if (!same(got, want, &why)) {
    std::printf("  perf check batch=%lld n=%lld k=%lld FAILED: %s\n", (long long)batch, (long long)n,
                (long long)k, why.c_str());
    return false;
  }
  return true;
}

perf_row run_perf_case(int64_t batch, int64_t n, int64_t k, double launch_us, uint64_t seed) {
  perf_row r{batch, n, k, false, 0, 0, 0};
  const size_t set_bytes = size_t(batch * n) * sizeof(float);
  const int n_sets = int(std::max<size_t>(2, (size_t(192) << 20) / set_bytes + 1));
  float* d_all;
  int32_t *d_len, *d_out;
  CK(cudaMalloc(&d_all, set_bytes * n_sets));
  CK(cudaMalloc(&d_len, size_t(batch) * sizeof(int32_t)));
  CK(cudaMalloc(&d_out, size_t(batch * k) * sizeof(int32_t)));
  fill_normal<<<1024, 256>>>(d_all, int64_t(batch * n) * n_sets, seed);
  CK(cudaGetLastError());
  {
    std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(n));
    CK(cudaMemcpy(d_len, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  auto set_ptr = [&](int i) { return d_all + size_t(i % n_sets) * size_t(batch * n); };
  r.ok = check_set(set_ptr(0), d_len, d_out, batch, n, k, true) &&
         check_set(set_ptr(n_sets - 1), d_len, d_out, batch, n, k, true);
  r.floor_us = double(set_bytes) / k_copy_bw * 1e6 + launch_us;
  if (!r.ok) {
    CK(cudaFree(d_all));
    CK(cudaFree(d_len));
    CK(cudaFree(d_out));
    return r;
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto launch = [&](int i) {
    lightning_topk_params p;
    p.scores = set_ptr(i);
    p.lengths = d_len;
    p.out = d_out;
    p.batch = batch;
    p.row_stride = n;
    p.k = k;
    if (!lightning_topk_cuda(p, st).ok()) std::exit(2);
  };
  // (a) per-launch events, queued behind a spin kernel so the GPU never waits on the host.
  const int n_runs = 300, n_warm = 20;
  std::vector<cudaEvent_t> ev(2 * (n_runs + n_warm));
  for (auto& e : ev) CK(cudaEventCreate(&e));
  spin<<<1, 1, 0, st>>>(40ll * 1000 * 1000);  // ~20 ms at 1.98 GHz
  for (int i = 0; i < n_runs + n_warm; ++i) {
    CK(cudaEventRecord(ev[2 * i], st));
    launch(i);
    CK(cudaEventRecord(ev[2 * i + 1], st));
  }
  CK(cudaStreamSynchronize(st));
  std::vector<float> t;
  for (int i = n_warm; i < n_runs + n_warm; ++i) {
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t.push_back(ms * 1000.f);
  }
  r.us = median(t);
  // (b) CUDA graph: G launches on rotating sets per graph; median over replays of time / G.
  const int G = 50, n_rep = 12;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < G; ++i) launch(i);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, st));  // warm-up
  spin<<<1, 1, 0, st>>>(20ll * 1000 * 1000);
  std::vector<float> tg;
  for (int rep = 0; rep < n_rep; ++rep) {
    CK(cudaEventRecord(ev[2 * rep], st));
    CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(ev[2 * rep + 1], st));
  }
  CK(cudaStreamSynchronize(st));
  for (int rep = 0; rep < n_rep; ++rep) {
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[2 * rep], ev[2 * rep + 1]));
    tg.push_back(ms * 1000.f / G);
  }
  r.graph_us = median(tg);
  // The graph's last launch wrote set G-1's result: it must be right too.
  r.ok = check_set(set_ptr(G - 1), d_len, d_out, batch, n, k, false);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(st));
  CK(cudaFree(d_all));
  CK(cudaFree(d_len));
  CK(cudaFree(d_out));
  return r;
}

double measure_launch_us() {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int n = 300;
  std::vector<cudaEvent_t> ev(2 * n);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  spin<<<1, 1, 0, st>>>(10ll * 1000 * 1000);
  for (int i = 0; i < n; ++i) {
    CK(cudaEventRecord(ev[2 * i], st));
    empty_kernel<<<1, 32, 0, st>>>();
    CK(cudaEventRecord(ev[2 * i + 1], st));
  }
  CK(cudaStreamSynchronize(st));
  std::vector<float> t;
  for (int i = 10; i < n; ++i) {
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t.push_back(ms * 1000.f);
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(st));
  return median(t);
}

}  // namespace

int lightning_topk_bench_main(int argc, char** argv) {
  std::map<std::tuple<long long, long long, long long>, double> peer;
  const bool eval_only = argc > 1 && std::strcmp(argv[1], "--eval-only") == 0;
  if (argc > 1 && !eval_only) {
    if (FILE* f = std::fopen(argv[1], "r")) {
      long long b, n, k;
      double us;
      while (std::fscanf(f, "%lld %lld %lld %lf", &b, &n, &k, &us) == 4) peer[{b, n, k}] = us;
      std::fclose(f);
    }
  }
  if (argc == 5 && std::strcmp(argv[1], "--profile") == 0) {
    // For ncu: 10 launches of one case on one random set, nothing else.
    const int64_t b = std::atoll(argv[2]), n = std::atoll(argv[3]), k = std::atoll(argv[4]);
    float* d;
    int32_t* d_out;
    CK(cudaMalloc(&d, size_t(b * n) * sizeof(float)));
    CK(cudaMalloc(&d_out, size_t(b * k) * sizeof(int32_t)));
    fill_normal<<<1024, 256>>>(d, b * n, 99);
    lightning_topk_params p;
    p.scores = d;
    p.out = d_out;
    p.batch = b;
    p.row_stride = n;
    p.k = k;
    for (int i = 0; i < 10; ++i)
      if (!lightning_topk_cuda(p, nullptr).ok()) return 2;
    CK(cudaDeviceSynchronize());
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  const uint32_t seed =
      uint32_t(
          std::strtoul(std::getenv("HART_TEST_SEED") ? std::getenv("HART_TEST_SEED") : "0", nullptr, 10)) ^
      0x5eed1234u;
  int n_fail = 0;
  for (const lt_cases::lt_case& c : lt_cases::eval_cases(seed, !eval_only))
    n_fail += run_eval_case(c) ? 0 : 1;
  std::printf("eval cases: %d failed\n", n_fail);
  if (eval_only) return n_fail ? 1 : 0;

  const double launch_us = measure_launch_us();
  std::printf("empty-kernel launch (events): %.2f us\n", launch_us);
  const int64_t K = 1024;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> cases = {
      {1, 16 * K, 512},   {1, 64 * K, 512},   {1, 256 * K, 512},  {1, 1024 * K, 512},
      {64, 256 * K, 512}, {1, 256 * K, 1024}, {1, 256 * K, 2048}, {64, 256 * K, 2048},
  };
  std::vector<perf_row> rows;
  uint64_t s = 1 + seed;
  for (auto [b, n, k] : cases) rows.push_back(run_perf_case(b, n, k, launch_us, s++));

  std::printf(
      "\nLightning top-k (fp32 scores, random normal rows, median; floor = bytes/4.15 TB/s + %.2f us "
      "launch)\n",
      launch_us);
  std::printf("| batch | n | k | time us | graph us | floor us | %% of floor | torch.topk us | speed-up |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const perf_row& r : rows) {
    auto it = peer.find({r.batch, r.n, r.k});
    char pbuf[32] = "-", sbuf[32] = "-";
    if (it != peer.end()) std::snprintf(pbuf, sizeof pbuf, "%.1f", it->second);
    hart::bench::summary().push_back(
        {"T1 Lightning top-k",
         "batch " + std::to_string(r.batch) + ", n " + std::to_string(r.n) + ", k " + std::to_string(r.k),
         r.us, r.floor_us, "torch.topk", pbuf, r.ok});
    if (!r.ok) {
      std::printf("| %lld | %lld | %lld | FAILED CHECK | - | %.2f | - | %s | - |\n", (long long)r.batch,
                  (long long)r.n, (long long)r.k, r.floor_us, pbuf);
      continue;
    }
    if (it != peer.end()) std::snprintf(sbuf, sizeof sbuf, "%.1fx", it->second / r.us);
    std::printf("| %lld | %lld | %lld | %.2f | %.2f | %.2f | %.0f%% | %s | %s |\n", (long long)r.batch,
                (long long)r.n, (long long)r.k, r.us, r.graph_us, r.floor_us, 100.0 * r.floor_us / r.us, pbuf,
                sbuf);
  }
  return n_fail ? 1 : 0;
}

#ifndef HART_HOT_KERNELS_BENCH
int main(int argc, char** argv) {
  return lightning_topk_bench_main(argc, argv);
}
#endif
