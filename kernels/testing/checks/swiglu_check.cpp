// swiglu (clamped, routing-weighted): CUDA vs CPU within 1e-6·|y| + 1e-37
// (kernels/swiglu/swiglu_test.cpp: expf within 2 ulp, same operation order).
// "bf16" lines (swiglu_params::bf16, the GPU engine's fp8 mode): the same rounded
// operations but CUDA's expf, so an output near a bf16 rounding midpoint may round
// the other way: one bf16 ulp of y on at most max(2, 1e-3) of the outputs, every
// output a bf16 value (swiglu_test.cpp, cuda_bf16_matches_cpu).
#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>

namespace hart::op_check_detail {
namespace {

struct shape {
  int64_t n_rows, dim;
  bool weighted, bf16;
};

status check_one(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const auto gate = normal(rng, s.n_rows * s.dim, 4.0f), up = normal(rng, s.n_rows * s.dim, 4.0f);
  auto rw = normal(rng, s.n_rows, 1.0f);
  if (s.bf16) {
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);  // routing weights, as the test draws them
    for (float& v : rw) v = ud(rng);
  }
  std::vector<float> cpu(s.n_rows * s.dim), gpu;
  swiglu_params p{gate.data(), up.data(), nullptr, cpu.data(), s.n_rows, s.dim, 0, 10.0f};
  p.row_weight = s.weighted ? rw.data() : nullptr;
  p.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(swiglu_cpu(p));
  dev<float> d_g(gate), d_u(up), d_rw(rw), d_out(std::vector<float>(cpu.size(), NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  p.gate = d_g.get();
  p.up = d_u.get();
  p.row_weight = s.weighted ? d_rw.get() : nullptr;
  p.out = d_out.get();
  HART_RETURN_IF_ERROR(swiglu_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("swiglu", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_out.to_host(gpu));
  std::vector<double> want(cpu.begin(), cpu.end()), scale(want.size());
  const std::string text = "n_rows=" + std::to_string(s.n_rows) + " dim=" + std::to_string(s.dim) +
                           " limit=10" + (s.weighted ? "" : " unweighted") + (s.bf16 ? " bf16" : "");
  if (!s.bf16) {
    for (size_t i = 0; i < want.size(); ++i) scale[i] = std::fabs(want[i]);
    lines.push_back(compare("swiglu", text, gpu, want, scale, 1e-6, 1e-37, "1e-06 * |y|"));
    return {};
  }
  // scale: one bf16 ulp of y (the gap from y away from zero), so max_rel counts ulps
  int64_t n_diff = 0, n_inexact = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale[i] = std::fabs(double(f32_from_bf16(uint16_t(bf16_from_f32(cpu[i]) + 1))) - want[i]);
    n_diff += gpu[i] != cpu[i];
    n_inexact += gpu[i] != round_to_bf16(gpu[i]);
  }
  op_check_line l = compare("swiglu", text, gpu, want, scale, 1.0, 0.0, "1 bf16 ulp of y on <=1e-3");
  l.pass = l.pass && n_inexact == 0 && n_diff <= std::max<int64_t>(2, int64_t(gpu.size()) / 1000);
  lines.push_back(l);
  return {};
}

}  // namespace

status check_swiglu(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "swiglu");
  // fp32; bf16 as the engine calls it: routed experts' rows (weighted), the shared
  // expert's (unweighted), Flash's and Pro's widths.
  const shape shapes[] = {{4, 2048, true, false},
                          {33, 1000, true, false},
                          {48, 2048, true, true},
                          {6, 2048, false, true},
                          {16, 3072, true, true}};
  for (const shape& s : shapes) HART_RETURN_IF_ERROR(check_one(rng, s, lines));
  return {};
}

}  // namespace hart::op_check_detail
