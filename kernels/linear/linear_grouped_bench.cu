// Standalone benchmark of the routed experts' grouped linears at V4-Flash's
// shapes (256 experts, top-6, 4096 -> 2048 -> 4096; target M1: >= 75% of copy
// bandwidth on the touched experts' bytes at decode batch 1..64), FP8 experts
// (e4m3 + 128×128 scales) beside MXFP4 experts (e2m1 pairs + per-32 scales,
// the release checkpoints' form), both through linear_grouped_tc_cuda; then
// prefill passes (512 tokens, and 1365: the engine's largest MoE chunk) on the
// wide tiles, where the TFLOP/s column is the one to read.
// Built without CMake by scripts/gpu/bench_linear.sh (the GPU image lacks GTest):
//
//   linear_grouped_bench    checks + timings + table
//
// 1. Copy bandwidth (1 GiB device-to-device, read + write) as the roof.
// 2. Per batch: 16 random routings (each token's 6 experts distinct), rows
//    sorted by expert and cut into tiles of <= 8 (the engine's decode plan),
//    or of <= 64 for the prefill passes (its wide plan).
//    The first routing's w1 outputs are checked (16 sampled outputs of every
//    row) against a host double sum of the same decoded products, within
//    2^-12·Σ|x'·w'| (linear_grouped_test's bound); a failed check prints FAIL.
// 3. Times w1, w3 and w2 back to back with CUDA events, median of 160 calls,
//    the routing rotated each call (~1-5 GB of distinct experts per rotation:
//    no L2 reuse beyond what one step would have).
// GB/s = bytes of the experts the step touches (codes + scales, all three
// linears) / time. Activation quantization and SwiGLU are not in the time.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_bench_common.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

using namespace hart;
using namespace hart::bench;

namespace {

constexpr int64_t k_experts = 256, k_topk = 6, k_dim = 4096, k_inter = 2048;
constexpr int k_routings = 16;

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
  return 2.0 * bytes * 10 / (ms * 1e-3);
}

// One linear's weights for all experts in one format, and the group table.
struct expert_set {
  bool mxfp4 = false;
  int64_t in = 0, out = 0;
  uint8_t *codes = nullptr, *scales = nullptr;
  int64_t code_bytes = 0, scale_bytes = 0;  // per expert
  linear_group_weight* table = nullptr;

  expert_set(bool fp4, int64_t in_, int64_t out_, uint64_t seed) : mxfp4(fp4), in(in_), out(out_) {
    code_bytes = fp4 ? out * in / 2 : out * in;
    scale_bytes = fp4 ? out * in / 32 : (out / 128) * (in / 128);
    CK(cudaMalloc(&codes, size_t(code_bytes * k_experts)));
    CK(cudaMalloc(&scales, size_t(scale_bytes * k_experts)));
    // Any byte is a finite MXFP4 pair; fill_codes keeps e4m3 codes finite. Scales 2^-7..2^6.
    fill_codes<<<1024, 256>>>(codes, code_bytes * k_experts, seed, 0);
    fill_codes<<<256, 256>>>(scales, scale_bytes * k_experts, seed + 1, 1);
    std::vector<linear_group_weight> t(k_experts);
    for (int64_t e = 0; e < k_experts; ++e) t[e] = {codes + e * code_bytes, scales + e * scale_bytes};
    CK(cudaMalloc(&table, t.size() * sizeof(linear_group_weight)));
    CK(cudaMemcpy(table, t.data(), t.size() * sizeof(linear_group_weight), cudaMemcpyHostToDevice));
  }
  expert_set(const expert_set&) = delete;
  ~expert_set() {
    cudaFree(codes);
    cudaFree(scales);
    cudaFree(table);
  }
  int64_t expert_bytes() const { return code_bytes + scale_bytes; }
};

// A routing's tiles on the device.
struct routing {
  int32_t *group = nullptr, *row0 = nullptr, *rows = nullptr, *n_tiles = nullptr;
  int64_t max_tiles = 0, touched = 0;
  std::vector<int32_t> h_group, h_row0, h_rows;
};

routing make_routing(std::mt19937& rng, int64_t tokens, int32_t tile_max) {
  std::vector<int32_t> per_expert(k_experts, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int32_t> picked;
    std::uniform_int_distribution<int32_t> pick(0, int32_t(k_experts - 1));
    while (int64_t(picked.size()) < k_topk) picked.insert(pick(rng));
    for (int32_t e : picked) ++per_expert[e];
  }
  routing r;
  int32_t row = 0;
  for (int32_t e = 0; e < k_experts; ++e) {
    if (per_expert[e] > 0) ++r.touched;
    for (int32_t done = 0; done < per_expert[e];) {
      const int32_t n = std::min<int32_t>(per_expert[e] - done, tile_max);
      r.h_group.push_back(e);
      r.h_row0.push_back(row + done);
      r.h_rows.push_back(n);
      done += n;
    }
    row += per_expert[e];
  }
  r.max_tiles = int64_t(r.h_group.size());
  const int32_t n = int32_t(r.max_tiles);
  for (auto [d, h] : {std::pair{&r.group, &r.h_group}, {&r.row0, &r.h_row0}, {&r.rows, &r.h_rows}}) {
    CK(cudaMalloc(d, h->size() * 4));
    CK(cudaMemcpy(*d, h->data(), h->size() * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&r.n_tiles, 4));
  CK(cudaMemcpy(r.n_tiles, &n, 4, cudaMemcpyHostToDevice));
  return r;
}

linear_grouped_params params(const expert_set& w, const routing& r, const uint8_t* x_codes,
                             const float* x_scales, float* y, int64_t n_rows, int32_t tile_max) {
  linear_grouped_params p{nullptr, y,         w.table,     k_experts, r.group, r.row0,
                          r.rows,  r.n_tiles, r.max_tiles, n_rows,    w.in,    w.out};
  p.max_tile_rows = tile_max;
  p.x_codes = x_codes;
  p.x_scales = x_scales;
  p.w_mxfp4 = w.mxfp4;
  return p;
}

// Worst error / (2^-12 Σ|x'w'|) over 16 sampled outputs of every row (first routing, w1).
double check(const expert_set& w, const routing& r, const uint8_t* d_codes, const float* d_scales,
             const float* d_y, int64_t n_rows) {
  const int64_t in = w.in, out = w.out;
  std::vector<uint8_t> xc(size_t(n_rows * in));
  std::vector<float> xs(size_t(n_rows * in / 128)), y(size_t(n_rows * out));
  CK(cudaMemcpy(xc.data(), d_codes, xc.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(xs.data(), d_scales, xs.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  std::vector<float> wrow(static_cast<size_t>(in));
  for (size_t t = 0; t < r.h_group.size(); ++t) {
    const int64_t e = r.h_group[t];
    for (int j = 0; j < 16; ++j) {
      const int64_t o = j * (out - 1) / 15;
      if (w.mxfp4) {
        std::vector<uint8_t> pk(static_cast<size_t>(in / 2)), sc(static_cast<size_t>(in / 32));
        CK(cudaMemcpy(pk.data(), w.codes + e * w.code_bytes + o * in / 2, pk.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sc.data(), w.scales + e * w.scale_bytes + o * in / 32, sc.size(),
                      cudaMemcpyDeviceToHost));
        if (!mxfp4_mma_order(pk.data(), 1, in, pk.data()).ok())
          std::exit(1);  // back to kernels/quant's order
        if (!mxfp4_dequantize(pk.data(), sc.data(), 1, in, wrow.data()).ok()) std::exit(1);
      } else {
        std::vector<uint8_t> cd(static_cast<size_t>(in)), sc(static_cast<size_t>(in / 128));
        CK(cudaMemcpy(cd.data(), w.codes + e * w.code_bytes + o * in, cd.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sc.data(), w.scales + e * w.scale_bytes + (o / 128) * (in / 128), sc.size(),
                      cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < in; ++i)
          wrow[i] = f32_from_e4m3(cd[i]) * std::ldexp(1.0f, int(sc[i / 128]) - 127);
      }
      for (int64_t rr = r.h_row0[t]; rr < r.h_row0[t] + r.h_rows[t]; ++rr) {
        double acc = 0, mag = 0;
        for (int64_t i = 0; i < in; ++i) {
          const double p = double(wrow[i]) * f32_from_e4m3(xc[rr * in + i]) * xs[rr * (in / 128) + i / 128];
          acc += p;
          mag += std::fabs(p);
        }
        const double got = y[rr * out + o];
        worst = std::max(
            worst, std::isfinite(got) ? std::fabs(got - acc) / (std::ldexp(mag, -12) + 1e-30) : INFINITY);
      }
    }
  }
  return worst;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth();
  std::printf("device %s, %d SMs; measured D2D copy %.0f GB/s (read+write)\n", prop.name,
              prop.multiProcessorCount, copy_bw / 1e9);
  const int64_t max_rows = 1365 * k_topk;
  // Activations: random floats quantized as the engine does (codes + per-128 scales).
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto quantized = [&](int64_t width, uint8_t** codes, float** scales) {
    std::vector<float> x(size_t(max_rows * width));
    for (float& v : x) v = nd(rng);
    float* d;
    CK(cudaMalloc(&d, x.size() * 4));
    CK(cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(codes, x.size()));
    CK(cudaMalloc(scales, x.size() / 128 * 4));
    if (!fp8_act_quant_cuda(d, width, *codes, *scales, max_rows, width, nullptr).ok()) std::exit(1);
    CK(cudaFree(d));
  };
  uint8_t *xc, *hc;
  float *xs, *hs, *y1, *y3, *y2;
  quantized(k_dim, &xc, &xs);
  quantized(k_inter, &hc, &hs);
  CK(cudaMalloc(&y1, size_t(max_rows * k_inter) * 4));
  CK(cudaMalloc(&y3, size_t(max_rows * k_inter) * 4));
  CK(cudaMalloc(&y2, size_t(max_rows * k_dim) * 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct row {
    const char* format;
    int64_t tokens, touched;
    double mb, us, gbs, tflops;
    bool ok;
  };
  std::vector<row> table;
  for (const bool fp4 : {false, true}) {
    const expert_set w1(fp4, k_dim, k_inter, 11), w3(fp4, k_dim, k_inter, 13), w2(fp4, k_inter, k_dim, 17);
    const char* format = fp4 ? "MXFP4" : "FP8";
    for (const int64_t tokens : {1, 2, 4, 8, 16, 32, 64, 512, 1365}) {
      // The engine's plan: wide tiles from 4 rows per expert on average (runtime/gpu/gpu_moe.cpp).
      const int32_t tile_max = int32_t(tokens * k_topk >= 4 * k_experts ? linear_grouped_wide_tile_rows
                                                                        : linear_grouped_tile_rows);
      std::mt19937 route_rng(static_cast<uint32_t>(tokens));
      std::vector<routing> rs;
      for (int i = 0; i < k_routings; ++i) rs.push_back(make_routing(route_rng, tokens, tile_max));
      const int64_t n_rows = tokens * k_topk;
      auto step = [&](const routing& r) {
        if (!linear_grouped_tc_cuda(params(w1, r, xc, xs, y1, n_rows, tile_max), nullptr).ok() ||
            !linear_grouped_tc_cuda(params(w3, r, xc, xs, y3, n_rows, tile_max), nullptr).ok() ||
            !linear_grouped_tc_cuda(params(w2, r, hc, hs, y2, n_rows, tile_max), nullptr).ok()) {
          std::exit(1);
        }
      };
      CK(cudaMemset(y1, 0xff, size_t(max_rows * k_inter) * 4));  // NaN poison
      step(rs[0]);
      CK(cudaDeviceSynchronize());
      const double worst = check(w1, rs[0], xc, xs, y1, n_rows);
      if (!(worst <= 1.0)) {
        std::printf("FAIL %s tokens=%lld: error %.3g x the bound\n", format, (long long)tokens, worst);
        table.push_back({format, tokens, 0, 0, 0, 0, 0, false});
        continue;
      }
      std::vector<float> ms(160);
      double touched = 0;
      for (int i = 0; i < 170; ++i) {
        const routing& r = rs[size_t(i % k_routings)];
        CK(cudaEventRecord(e0));
        step(r);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (i >= 10) CK(cudaEventElapsedTime(&ms[i - 10], e0, e1));
        if (i >= 10) touched += double(r.touched);
      }
      touched /= 160;
      std::sort(ms.begin(), ms.end());
      const double us = ms[ms.size() / 2] * 1e3;
      const double bytes = touched * double(w1.expert_bytes() + w3.expert_bytes() + w2.expert_bytes());
      const double flops = 2.0 * double(n_rows) * double(3 * k_dim * k_inter);
      table.push_back({format, tokens, int64_t(std::lround(touched)), bytes / 1e6, us,
                       bytes / (us * 1e-6) / 1e9, flops / (us * 1e-6) / 1e12, true});
    }
  }
  std::printf(
      "\n| experts | tokens | tiles | experts touched | MB touched | us (median) | GB/s | %% of copy | "
      "TFLOP/s | M1 (>= "
      "75%%) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const row& r : table) {
    if (!r.ok) {
      std::printf("| %s | %lld | | | | FAIL | | | | |\n", r.format, (long long)r.tokens);
      continue;
    }
    const double pct = 100.0 * r.gbs * 1e9 / copy_bw;
    const bool wide = r.tokens * k_topk >= 4 * k_experts;
    std::printf("| %s | %lld | %s | %lld | %.1f | %.2f | %.0f | %.1f | %.1f | %s |\n", r.format,
                (long long)r.tokens, wide ? "wide" : "narrow", (long long)r.touched, r.mb, r.us, r.gbs, pct,
                r.tflops,
                wide        ? ""
                : pct >= 75 ? "met"
                            : "missed");
  }
  std::printf("\nreproduce: bash scripts/gpu/bench_linear.sh\n");
  return 0;
}
