// rope (interleaved partial, in place): CUDA vs CPU; rotated channels within
// 1e-6·|pair| (kernels/rope/rope_test.cpp: same fp32 angle, cosf/sinf within
// 2 ulp), the untouched channels exactly. "bf16" lines (rope_params::bf16, the
// GPU engine's fp8 mode, on bf16 inputs as the engine's): each rotated value
// rounded, so add one bf16 step (2^-7·|y|), bit-identical on all but 1e-3 of the
// rotated values (rope_test.cpp, cuda_bf16_matches_cpu).
#include "kernels/rope/rope.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <cstring>

namespace hart::op_check_detail {
namespace {

struct shape {
  int64_t n_rows, n_heads, head_dim, rope_dim;
  bool inverse, bf16;
  std::string text() const {
    return "rows=" + std::to_string(n_rows) + " heads=" + std::to_string(n_heads) +
           " head_dim=" + std::to_string(head_dim) + " rope_dim=" + std::to_string(rope_dim) +
           (inverse ? " inverse" : "") + (bf16 ? " bf16" : "");
  }
};

status check_one(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const int64_t H = s.n_heads, D = s.head_dim, rd = s.rope_dim;
  auto x = normal(rng, s.n_rows * H * D, 1.0f);
  if (s.bf16) {
    for (float& v : x) v = round_to_bf16(v);
  }
  std::vector<int64_t> pos(s.n_rows);
  std::uniform_int_distribution<int64_t> p(0, 1 << 20);
  for (auto& v : pos) v = p(rng);
  std::vector<float> inv_freq(rd / 2);
  for (int64_t i = 0; i < rd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(rd));
  rope_params rp{nullptr, nullptr, nullptr, s.n_rows, H, D, rd, 0, 1.0f, s.inverse};
  rp.bf16 = s.bf16;
  std::vector<float> cpu = x, gpu;
  rp.x = cpu.data();
  rp.pos = pos.data();
  rp.inv_freq = inv_freq.data();
  HART_RETURN_IF_ERROR(rope_cpu(rp));
  dev<float> d_x(x), d_f(inv_freq);
  dev<int64_t> d_pos(pos);
  HART_RETURN_IF_ERROR(d_x.ok());
  rp.x = d_x.get();
  rp.pos = d_pos.get();
  rp.inv_freq = d_f.get();
  HART_RETURN_IF_ERROR(rope_cuda(rp, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("rope", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_x.to_host(gpu));
  // scale 0 for untouched channels: they must match exactly. bf16: 2^-7·(|y| + 2^7·1e-6·|pair|).
  std::vector<double> scale(x.size(), 0.0);
  int64_t n_rotated = 0, n_flipped = 0;
  for (size_t e = 0; e < x.size(); ++e) {
    const int64_t c = int64_t(e) % D;
    if (c < D - rd) continue;
    const size_t pair = e - size_t((c - (D - rd)) % 2);
    const double mag = std::hypot(double(x[pair]), double(x[pair + 1]));
    scale[e] = s.bf16 ? std::fabs(double(cpu[e])) + 0x1p7 * 1e-6 * mag : mag;
    ++n_rotated;
    n_flipped += std::memcmp(&gpu[e], &cpu[e], sizeof(float)) != 0;
  }
  op_check_line l = compare(
      "rope", s.text(), gpu, std::vector<double>(cpu.begin(), cpu.end()), scale, s.bf16 ? 0x1p-7 : 1e-6, 0.0,
      s.bf16 ? "1e-06*|pair|+2^-7*|y| on <=1e-3, rest exact" : "1e-06 * |pair|, rest exact");
  if (s.bf16) l.pass = l.pass && n_flipped <= n_rotated / 1000;
  lines.push_back(l);
  return {};
}

}  // namespace

status check_rope(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "rope");
  // fp32: the attention's heads both ways. bf16 as the engine calls it: the indexer's
  // q (64 heads of 128, forward) and the attention output (64 heads of 512, inverse).
  const shape shapes[] = {{9, 8, 512, 64, false, false},
                          {9, 8, 512, 64, true, false},
                          {9, 64, 128, 64, false, true},
                          {9, 64, 512, 64, true, true}};
  for (const shape& s : shapes) HART_RETURN_IF_ERROR(check_one(rng, s, lines));
  return {};
}

}  // namespace hart::op_check_detail
