// swiglu (clamped, routing-weighted): CUDA vs CPU within 1e-6·|y| + 1e-37
// (kernels/swiglu/swiglu_test.cpp: expf within 2 ulp, same operation order).
#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/op_check_util.h"

namespace hart::op_check_detail {

status check_swiglu(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "swiglu");
  const int64_t shapes[][2] = {{4, 2048}, {33, 1000}};
  for (const auto& s : shapes) {
    const int64_t n_rows = s[0], dim = s[1];
    const auto gate = normal(rng, n_rows * dim, 4.0f), up = normal(rng, n_rows * dim, 4.0f);
    const auto rw = normal(rng, n_rows, 1.0f);
    std::vector<float> cpu(n_rows * dim), gpu;
    HART_RETURN_IF_ERROR(swiglu_cpu({gate.data(), up.data(), rw.data(), cpu.data(), n_rows, dim, 0, 10.0f}));
    dev<float> d_g(gate), d_u(up), d_rw(rw), d_out(std::vector<float>(cpu.size(), NAN));
    HART_RETURN_IF_ERROR(d_out.ok());
    HART_RETURN_IF_ERROR(swiglu_cuda({d_g.get(), d_u.get(), d_rw.get(), d_out.get(), n_rows, dim, 0, 10.0f}, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("swiglu", cudaDeviceSynchronize()));
    HART_RETURN_IF_ERROR(d_out.to_host(gpu));
    std::vector<double> want(cpu.begin(), cpu.end()), scale(want.size());
    for (size_t i = 0; i < want.size(); ++i) scale[i] = std::fabs(want[i]);
    lines.push_back(compare("swiglu", "n_rows=" + std::to_string(n_rows) + " dim=" + std::to_string(dim) + " limit=10",
                            gpu, want, scale, 1e-6, 1e-37, "1e-06 * |y|"));
  }
  return {};
}

}  // namespace hart::op_check_detail
