// On-device fp8 (and MXFP4, for routed experts) re-quantization throughput of a weight update (W1: >= 1
// TB/s): weight_requant_fp8 (QDQ, encode, bitwise check: weight_requant.h) over the linears of one
// DeepSeek-V4 Flash layer's shapes, with the raw fp32 values already on the device. Checks first: the codes
// and scales of one linear must equal the CPU fp8_block_quantize of the CPU QDQ (no number is printed
// otherwise). GB/s = fp32 bytes re-quantized per second (1e9). Usage:
//   weight_requant_bench [REPEATS=20]
#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "runtime/gpu/weight_requant.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace hart;

namespace {

struct shape {
  const char* name;
  int64_t out, in;
};

// One V4-Flash layer's fp8 linears [out, in] (configs/deepseek-v4-flash) and one routed expert.
const shape k_shapes[] = {{"wq_a", 1024, 4096}, {"wq_b", 32768, 1024}, {"wkv", 512, 4096},
                          {"wo_b", 4096, 8192}, {"w1", 2048, 4096},    {"w2", 4096, 2048}};

int fail(const status& s) {
  std::fprintf(stderr, "weight_requant_bench: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  if (!gpu::cuda_status(cudaSetDevice(0), "cudaSetDevice").ok())
    return std::fprintf(stderr, "no CUDA device\n"), 1;
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  int64_t max_n = 0, total = 0;
  for (const shape& s : k_shapes) max_n = std::max(max_n, s.out * s.in), total += s.out * s.in;
  std::vector<float> host(static_cast<size_t>(max_n));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& x : host) x = nd(rng);

  auto raw = gpu::device_buffer::create(size_t(max_n) * 4),
       work = gpu::device_buffer::create(size_t(max_n) * 4);
  auto codes = gpu::device_buffer::create(size_t(max_n)),
       scales = gpu::device_buffer::create(size_t(max_n / 128 + 1024));
  gpu::weight_requant_scratch sc;
  if (!raw.ok() || !work.ok() || !codes.ok() || !scales.ok())
    return fail(status(status_code::resource_exhausted, "device memory"));
  if (status s = sc.reserve(); !s.ok()) return fail(s);
  float* w = static_cast<float*>(work->get());
  auto* q = static_cast<uint8_t*>(codes->get());
  auto* sq = static_cast<uint8_t*>(scales->get());
  cudaMemcpy(raw->get(), host.data(), size_t(max_n) * 4, cudaMemcpyHostToDevice);

  // Reference check on the first shape: the CPU's QDQ then encode.
  {
    const shape& s = k_shapes[0];
    const int64_t n = s.out * s.in, ns = ((s.out + 127) / 128) * ((s.in + 127) / 128);
    std::vector<float> v(host.begin(), host.begin() + n);
    std::vector<uint8_t> cq(static_cast<size_t>(n)), cs(static_cast<size_t>(ns)), gq(static_cast<size_t>(n)),
        gs(static_cast<size_t>(ns));
    if (status st = fp8_block_quantize(v.data(), s.out, s.in, 128, cq.data(), cs.data()); !st.ok())
      return fail(st);
    if (status st = fp8_block_dequantize(cq.data(), cs.data(), s.out, s.in, 128, v.data()); !st.ok())
      return fail(st);
    if (status st = fp8_block_quantize(v.data(), s.out, s.in, 128, cq.data(), cs.data()); !st.ok())
      return fail(st);
    cudaMemcpy(w, raw->get(), size_t(n) * 4, cudaMemcpyDeviceToDevice);
    auto exact = gpu::weight_requant_fp8(w, s.out, s.in, q, sq, sc, stream);
    if (!exact.ok()) return fail(exact.get_status());
    cudaMemcpy(gq.data(), q, size_t(n), cudaMemcpyDeviceToHost);
    cudaMemcpy(gs.data(), sq, size_t(ns), cudaMemcpyDeviceToHost);
    if (!*exact || gq != cq || gs != cs) {
      std::fprintf(
          stderr, "weight_requant_bench: device codes differ from the CPU reference (exact=%d); no numbers\n",
          int(*exact));
      return 1;
    }
  }

  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  std::printf("%-6s %8s %8s %10s %10s\n", "linear", "out", "in", "us", "GB/s");
  double all_us = 0;
  for (const shape& s : k_shapes) {
    const int64_t n = s.out * s.in;
    std::vector<float> us;
    for (int r = 0; r < repeats + 2; ++r) {
      cudaMemcpyAsync(w, raw->get(), size_t(n) * 4, cudaMemcpyDeviceToDevice, stream);  // fresh raw values
      cudaEventRecord(t0, stream);
      auto exact = gpu::weight_requant_fp8(w, s.out, s.in, q, sq, sc, stream);  // ends with a stream sync
      cudaEventRecord(t1, stream);
      cudaEventSynchronize(t1);
      if (!exact.ok()) return fail(exact.get_status());
      float ms = 0;
      cudaEventElapsedTime(&ms, t0, t1);
      if (r >= 2) us.push_back(ms * 1e3f);  // two warm-ups
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    all_us += med;
    std::printf("%-6s %8lld %8lld %10.1f %10.1f\n", s.name, (long long)s.out, (long long)s.in, med,
                n * 4.0 / med * 1e-3);
  }
  std::printf(
      "weight_requant_bench total_fp32_bytes=%lld us=%.1f gb_per_s=%.1f (per linear, each with its sync)\n",
      (long long)total * 4, all_us, total * 4.0 / all_us * 1e-3);

  // As an update runs them (gpu_weights.cpp): the six kernels back to back from
  // two staging copies of the raw values, one sync and one counter check at the end.
  auto raw2 = gpu::device_buffer::create(size_t(max_n) * 4);
  if (!raw2.ok()) return fail(raw2.get_status());
  std::vector<float> pipe_us;
  for (int r = 0; r < repeats + 2; ++r) {
    float* stage[2] = {w, static_cast<float*>(raw2->get())};
    int i = 0;
    for (const shape& s : k_shapes) {  // fresh raw values (outside the timed region below)
      cudaMemcpyAsync(stage[i++ % 2], raw->get(), size_t(s.out * s.in) * 4, cudaMemcpyDeviceToDevice, stream);
    }
    cudaStreamSynchronize(stream);
    if (status st = sc.reserve(); !st.ok()) return fail(st);
    cudaEventRecord(t0, stream);
    i = 0;
    for (const shape& s : k_shapes) {
      if (status st = gpu::weight_requant_fp8_async(stage[i++ % 2], s.out, s.in, q, sq, sc.count(), stream);
          !st.ok()) {
        return fail(st);
      }
    }
    cudaEventRecord(t1, stream);
    if (status st = sc.check(stream); !st.ok()) return fail(st);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    if (r >= 2) pipe_us.push_back(ms * 1e3f);
  }
  std::sort(pipe_us.begin(), pipe_us.end());
  const double pipe_med = pipe_us[pipe_us.size() / 2];
  std::printf(
      "weight_requant_bench total_fp32_bytes=%lld us=%.1f gb_per_s=%.1f (one update: back to back, one sync; "
      "target >= 1000)\n",
      (long long)total * 4, pipe_med, total * 4.0 / pipe_med * 1e-3);

  // A routed expert of a model served MXFP4: the raw values straight to e2m1
  // pairs + per-32 scales (no QDQ pass, no write-back). w1's bytes checked
  // against the host's mxfp4_quantize + mxfp4_mma_order first.
  for (const int k : {4, 5}) {
    const shape& s = k_shapes[k];
    const int64_t n = s.out * s.in;
    if (k == 4) {
      std::vector<uint8_t> hp(size_t(n / 2)), hs(size_t(n / 32)), gp(hp.size()), gs(hs.size());
      if (status st = mxfp4_quantize(host.data(), s.out, s.in, hp.data(), hs.data()); !st.ok())
        return fail(st);
      if (status st = mxfp4_mma_order(hp.data(), s.out, s.in, hp.data()); !st.ok()) return fail(st);
      if (status st = gpu::weight_requant_mxfp4_async(static_cast<const float*>(raw->get()), s.out, s.in, q,
                                                      sq, sc.count(), stream);
          !st.ok()) {
        return fail(st);
      }
      cudaMemcpy(gp.data(), q, gp.size(), cudaMemcpyDeviceToHost);
      cudaMemcpy(gs.data(), sq, gs.size(), cudaMemcpyDeviceToHost);
      if (gp != hp || gs != hs) {
        std::fprintf(stderr,
                     "weight_requant_bench: device MXFP4 differs from the CPU reference; no numbers\n");
        return 1;
      }
    }
    std::vector<float> us;
    for (int r = 0; r < repeats + 2; ++r) {
      cudaEventRecord(t0, stream);
      if (status st = gpu::weight_requant_mxfp4_async(static_cast<const float*>(raw->get()), s.out, s.in, q,
                                                      sq, sc.count(), stream);
          !st.ok()) {
        return fail(st);
      }
      cudaEventRecord(t1, stream);
      cudaEventSynchronize(t1);
      float ms = 0;
      cudaEventElapsedTime(&ms, t0, t1);
      if (r >= 2) us.push_back(ms * 1e3f);
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    std::printf("mxfp4 %-6s %8lld %8lld %10.1f %10.1f (GB/s of fp32 read; + %.1f of codes written)\n", s.name,
                (long long)s.out, (long long)s.in, med, n * 4.0 / med * 1e-3,
                n * (0.5 + 1.0 / 32) / med * 1e-3);
  }
  if (status st = sc.check(stream); !st.ok()) return fail(st);
  std::printf("reproduce: %s %d\n", argv[0], repeats);
  return 0;
}
