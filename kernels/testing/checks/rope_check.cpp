// rope (interleaved partial, in place): CUDA vs CPU; rotated channels within
// 1e-6·|pair| (kernels/rope/rope_test.cpp: same fp32 angle, cosf/sinf within
// 2 ulp), the untouched channels exactly.
#include "kernels/rope/rope.h"
#include "kernels/testing/op_check_util.h"

namespace hart::op_check_detail {

status check_rope(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "rope");
  const int64_t n_rows = 9, H = 8, D = 512, rd = 64;
  const auto x = normal(rng, n_rows * H * D, 1.0f);
  std::vector<int64_t> pos(n_rows);
  std::uniform_int_distribution<int64_t> p(0, 1 << 20);
  for (auto& v : pos) v = p(rng);
  std::vector<float> inv_freq(rd / 2);
  for (int64_t i = 0; i < rd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(rd));
  for (const bool inverse : {false, true}) {
    std::vector<float> cpu = x, gpu;
    HART_RETURN_IF_ERROR(rope_cpu({cpu.data(), pos.data(), inv_freq.data(), n_rows, H, D, rd, 0, 1.0f, inverse}));
    dev<float> d_x(x), d_f(inv_freq);
    dev<int64_t> d_pos(pos);
    HART_RETURN_IF_ERROR(d_x.ok());
    HART_RETURN_IF_ERROR(rope_cuda({d_x.get(), d_pos.get(), d_f.get(), n_rows, H, D, rd, 0, 1.0f, inverse}, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("rope", cudaDeviceSynchronize()));
    HART_RETURN_IF_ERROR(d_x.to_host(gpu));
    std::vector<double> scale(x.size(), 0.0);  // 0 for untouched channels: they must match exactly
    for (size_t e = 0; e < x.size(); ++e) {
      const int64_t c = int64_t(e) % D;
      if (c < D - rd) continue;
      const size_t pair = e - size_t((c - (D - rd)) % 2);
      scale[e] = std::hypot(double(x[pair]), double(x[pair + 1]));
    }
    lines.push_back(compare("rope", std::string("rows=9 heads=8 head_dim=512 rope_dim=64") + (inverse ? " inverse" : ""),
                            gpu, std::vector<double>(cpu.begin(), cpu.end()), scale, 1e-6, 0.0,
                            "1e-06 * |pair|, rest exact"));
  }
  return {};
}

}  // namespace hart::op_check_detail
