// Standalone benchmark for linear_fp8_cuda and linear_fp8_tc_cuda (tensor cores)
// on V4-Flash decode shapes (target
// G1: >= 80% of copy bandwidth for weights >= 16 MB). Built without CMake by
// scripts/gpu/bench_linear.sh (the GPU image lacks GTest/OpenBLAS):
//
//   linear_bench            checks + timings + table
//
// 1. Measures device-to-device copy bandwidth (1 GiB, read + write) as the roof.
// 2. Per case: random e4m3 weights and e8m0 scales drawn on the device, random
//    inputs; checks 64 sampled outputs of every row against a host double sum of
//    the same exact products (the kernels/quant rule applied on the host), within
//    (in/32 + 24)·2^-24·Σ|x'·w'| (CUDA cores) or 2^-12·Σ|x'·w'| (tensor cores);
//    a failed case prints FAIL and no time.
// 3. Times with CUDA events: median of 200 calls (activation QDQ + product), the
//    weights rotated over copies totalling >= 192 MB (> 3x the 60 MB L2).
// Weight GB/s = (e4m3 bytes + scale bytes) / time.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_bench_common.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

using namespace hart;

namespace {

using namespace hart::bench;

using shape = linear_shape;

// V4-Flash decode linears (v4-model.md weight table).
const shape k_shapes[] = {{"wq_a 4096->1024", 4096, 1024},  {"wq_b 1024->32768", 1024, 32768},
                          {"wkv 4096->512", 4096, 512},     {"wo_b 8192->4096", 8192, 4096},
                          {"w1/w3 4096->2048", 4096, 2048}, {"w2 2048->4096", 2048, 4096}};
const int64_t k_rows[] = {1, 2, 4, 8, 16, 32, 64};

double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes * 10 / (ms * 1e-3);  // read + write
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth();
  std::printf("device %s, %d SMs; measured D2D copy %.0f GB/s (read+write)\n", prop.name,
              prop.multiProcessorCount, copy_bw / 1e9);
  auto ctx = linear_cuda_context::create(64, 8192);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", ctx.get_status().to_string().c_str());
    return 1;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct row {
    const shape* s;
    int64_t m;
    const char* path;
    double us, gbs;
    bool ok;
  };
  std::vector<row> table;
  for (const shape& s : k_shapes) {
    const int64_t w_bytes = s.in * s.out, s_bytes = ((s.out + 127) / 128) * ((s.in + 127) / 128);
    const int n_sets = int(std::max<int64_t>(2, (int64_t(192) << 20) / w_bytes + 1));
    uint8_t *d_w, *d_s;
    CK(cudaMalloc(&d_w, size_t(w_bytes) * n_sets));
    CK(cudaMalloc(&d_s, size_t(s_bytes) * n_sets));
    fill_codes<<<1024, 256>>>(d_w, w_bytes * n_sets, 7, 0);
    fill_codes<<<64, 256>>>(d_s, s_bytes * n_sets, 9, 1);
    std::vector<float> x(64 * s.in);
    for (float& v : x) v = nd(rng);
    float *d_x, *d_y;
    CK(cudaMalloc(&d_x, x.size() * 4));
    CK(cudaMalloc(&d_y, size_t(64 * s.out) * 4));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    for (int64_t m : k_rows) {
      for (const bool tc : {false, true}) {
        // CUDA cores: exact products, (in/32 + 24) fp32 roundings; tensor cores: 2^-12 (linear_cuda_test).
        auto run = tc ? linear_fp8_tc_cuda : linear_fp8_cuda;
        const double rtol = tc ? std::ldexp(1.0, -12) : (double(s.in) / 32.0 + 24.0) * std::ldexp(1.0, -24);
        const char* path = tc ? "tensor cores" : "CUDA cores";
        linear_fp8_params p{d_x, d_w, d_s, d_y, m, s.in, s.out};
        CK(cudaMemset(d_y, 0xff, size_t(m * s.out) * 4));  // NaN poison
        if (!run(p, **ctx, nullptr).ok()) return 1;
        CK(cudaDeviceSynchronize());
        const double worst = check_linear(s.in, s.out, m, d_x, d_w, d_s, d_y, rtol);
        if (!(worst <= 1.0)) {
          std::printf("FAIL %s m=%lld %s: error %.3g x the bound\n", s.name, (long long)m, path, worst);
          table.push_back({&s, m, path, 0, 0, false});
          continue;
        }
        std::vector<float> ms(200);
        for (int i = 0; i < 210; ++i) {
          p.w = d_w + (i % n_sets) * w_bytes;
          p.w_scale = d_s + (i % n_sets) * s_bytes;
          CK(cudaEventRecord(e0));
          if (!run(p, **ctx, nullptr).ok()) return 1;
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          if (i >= 10) CK(cudaEventElapsedTime(&ms[i - 10], e0, e1));
        }
        std::sort(ms.begin(), ms.end());
        const double us = ms[ms.size() / 2] * 1e3;
        table.push_back({&s, m, path, us, double(w_bytes + s_bytes) / (us * 1e-6) / 1e9, true});
      }
    }
    CK(cudaFree(d_w));
    CK(cudaFree(d_s));
    CK(cudaFree(d_x));
    CK(cudaFree(d_y));
  }
  std::printf(
      "\n| shape | weight MB | rows | path | us (median) | weight GB/s | %% of copy | G1 (>= 80%%, weights "
      ">= 16 MB) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const row& r : table) {
    const double mb = double(r.s->in * r.s->out) / 1e6;
    if (!r.ok) {
      std::printf("| %s | %.1f | %lld | %s | FAIL | | | |\n", r.s->name, mb, (long long)r.m, r.path);
      continue;
    }
    const double pct = 100.0 * r.gbs * 1e9 / copy_bw;
    std::printf("| %s | %.1f | %lld | %s | %.2f | %.0f | %.1f | %s |\n", r.s->name, mb, (long long)r.m,
                r.path, r.us, r.gbs, pct, mb < 16 ? "n/a" : (pct >= 80 ? "met" : "missed"));
  }
  std::printf("\nreproduce: bash scripts/gpu/bench_linear.sh\n");
  return 0;
}
