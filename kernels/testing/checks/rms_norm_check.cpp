// rms_norm: CUDA vs CPU, rel 1e-5 of |y| (the CUDA test's bound: the device
// sums the squares in fp32 in another order). "bf16" lines: the GPU engine's fp8
// mode (official + bf16, the unweighted per-head q RMS, the fused RoPE) on bf16
// inputs; the device does the CPU's arithmetic there, so the norm is bit-identical
// and the rotated channels differ only through cosf/sinf: within 1e-6·|pair| plus
// one bf16 step (2^-7·|y|), bit-identical on all but 1e-3 of them
// (kernels/rms_norm/rms_norm_test.cpp, cuda_official_and_bf16_match_cpu).
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hart::op_check_detail {
namespace {

// One of the engine's bf16 calls (runtime/gpu: official_norm, the q RMS), in place
// where the engine's is.
struct bf16_case {
  int64_t n_rows, dim;
  bool weighted, in_place;
  int64_t rope_dim, rows_per_pos;  // rope_dim 0: no rotation
  const char* what;
};

status check_bf16(std::mt19937& rng, const bf16_case& c, std::vector<op_check_line>& lines) {
  std::vector<float> x = normal(rng, c.n_rows * c.dim, 2.0f), w = normal(rng, c.dim, 1.0f);
  for (float& v : x) v = round_to_bf16(v);  // the engine's activations are bf16 values
  const int64_t n_pos = c.n_rows / c.rows_per_pos;
  std::vector<int64_t> pos(n_pos);
  std::uniform_int_distribution<int64_t> pd(0, 1 << 20);
  for (auto& v : pos) v = pd(rng);
  std::vector<float> inv_freq(std::max<int64_t>(c.rope_dim / 2, 1));
  for (int64_t i = 0; i < c.rope_dim / 2; ++i) {
    inv_freq[i] = std::pow(160000.0f, -2.0f * float(i) / float(c.rope_dim));
  }
  auto params = [&](const float* px, const float* pw, float* py, const int64_t* ppos, const float* pf) {
    rms_norm_params p{px, c.weighted ? pw : nullptr, py, c.n_rows, c.dim, 0, 0, 1e-6f};
    p.official = c.weighted;  // as official_norm sets it; the q RMS sets bf16 alone
    p.bf16 = true;
    if (c.rope_dim) {
      p.rope_pos = ppos;
      p.rope_inv_freq = pf;
      p.rope_dim = c.rope_dim;
      p.rope_rows_per_pos = c.rows_per_pos;
    }
    return p;
  };
  std::vector<float> cpu = c.in_place ? x : std::vector<float>(x.size()), gpu;
  HART_RETURN_IF_ERROR(rms_norm_cpu(
      params(c.in_place ? cpu.data() : x.data(), w.data(), cpu.data(), pos.data(), inv_freq.data())));
  dev<float> d_x(x), d_w(w), d_f(inv_freq), d_y(std::vector<float>(c.in_place ? 1 : x.size(), NAN));
  dev<int64_t> d_pos(pos);
  HART_RETURN_IF_ERROR(d_y.ok());
  float* const y = c.in_place ? d_x.get() : d_y.get();
  HART_RETURN_IF_ERROR(rms_norm_cuda(params(d_x.get(), d_w.get(), y, d_pos.get(), d_f.get()), nullptr));
  HART_RETURN_IF_ERROR(cuda_status("rms_norm", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(c.in_place ? d_x.to_host(gpu) : d_y.to_host(gpu));

  std::string text = "n_rows=" + std::to_string(c.n_rows) + " dim=" + std::to_string(c.dim) + " " + c.what;
  if (!c.rope_dim) {
    lines.push_back(compare_bits("rms_norm", text + " bf16", gpu, cpu));
    return {};
  }
  // bound 2^-7·(|y| + 2^7·1e-6·|pair|) on the rotated channels, the rest 0 (and bitwise below)
  std::vector<double> scale(cpu.size(), 0.0);
  int64_t n_rotated = 0, n_flipped = 0, n_norm_off = 0;
  for (size_t e = 0; e < cpu.size(); ++e) {
    const int64_t i = int64_t(e) % c.dim;
    const bool same = std::memcmp(&gpu[e], &cpu[e], sizeof(float)) == 0;
    if (i < c.dim - c.rope_dim) {
      n_norm_off += !same;
      continue;
    }
    const size_t a = e - size_t((i - (c.dim - c.rope_dim)) % 2);
    const double pair = std::hypot(double(cpu[a]), double(cpu[a + 1]));
    scale[e] = std::max(std::fabs(double(gpu[e])), std::fabs(double(cpu[e]))) + 0x1p7 * 1e-6 * pair;
    ++n_rotated;
    n_flipped += !same;
  }
  op_check_line l = compare("rms_norm", text + " rope=" + std::to_string(c.rope_dim) + " bf16", gpu,
                            std::vector<double>(cpu.begin(), cpu.end()), scale, 0x1p-7, 0.0,
                            "bits; rotated 1e-06*|pair|+2^-7*|y|, <=1e-3");
  l.pass = l.pass && n_norm_off == 0 && n_flipped <= n_rotated / 1000;
  lines.push_back(l);
  return {};
}

}  // namespace

status check_rms_norm(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "rms_norm");
  const int64_t shapes[][2] = {{1, 7168}, {7, 4096}, {3, 989}};
  for (const auto& s : shapes) {
    const int64_t n_rows = s[0], dim = s[1];
    const auto x = normal(rng, n_rows * dim, 2.0f), w = normal(rng, dim, 1.0f);
    std::vector<float> y_cpu(n_rows * dim), y_gpu;
    HART_RETURN_IF_ERROR(rms_norm_cpu({x.data(), w.data(), y_cpu.data(), n_rows, dim, 0, 0, 1e-6f}));
    dev<float> d_x(x), d_w(w), d_y(std::vector<float>(n_rows * dim, NAN));
    HART_RETURN_IF_ERROR(d_y.ok());
    HART_RETURN_IF_ERROR(rms_norm_cuda({d_x.get(), d_w.get(), d_y.get(), n_rows, dim, 0, 0, 1e-6f}, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("rms_norm", cudaDeviceSynchronize()));
    HART_RETURN_IF_ERROR(d_y.to_host(y_gpu));
    std::vector<double> want(y_cpu.begin(), y_cpu.end()), scale(want.size());
    for (size_t i = 0; i < want.size(); ++i) scale[i] = std::fabs(want[i]);
    lines.push_back(compare("rms_norm", "n_rows=" + std::to_string(n_rows) + " dim=" + std::to_string(dim),
                            y_gpu, want, scale, 1e-5, 1e-30, "1e-05 * |y|"));
  }
  // The engine's bf16 calls: the hidden norms (Pro and Flash widths), q_lora's in place,
  // kv's with RoPE (a row a token), the per-head q RMS with RoPE (64 heads share a
  // position). Enough rotated values (4096+) that the 1e-3 allowance is a few.
  const bf16_case cases[] = {{1, 7168, true, false, 0, 1, "hidden"},
                             {7, 4096, true, false, 0, 1, "hidden"},
                             {5, 1536, true, true, 0, 1, "q_lora"},
                             {64, 512, true, true, 64, 1, "kv"},
                             {128, 512, false, true, 64, 64, "q_rms"}};
  for (const bf16_case& c : cases) HART_RETURN_IF_ERROR(check_bf16(rng, c, lines));
  return {};
}

}  // namespace hart::op_check_detail
