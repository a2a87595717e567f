// rms_norm: CUDA vs CPU, rel 1e-5 of |y| (the CUDA test's bound: the device
// sums the squares in fp32 in another order).
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/testing/op_check_util.h"

namespace hart::op_check_detail {

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
    lines.push_back(compare("rms_norm", "n_rows=" + std::to_string(n_rows) + " dim=" + std::to_string(dim), y_gpu,
                            want, scale, 1e-5, 1e-30, "1e-05 * |y|"));
  }
  return {};
}

}  // namespace hart::op_check_detail
