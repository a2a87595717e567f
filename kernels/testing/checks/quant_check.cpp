// quant: the engine's CUDA quantizers vs their CPU rules, bit for bit
// (kernels/quant/quant_test.cpp "CUDA parity: bit-exact": integer-ported
// codecs, power-of-two scales, single IEEE roundings, the same fp64 Hadamard
// butterflies; any two NaNs match): the FP8 input form of the tensor-core
// linears (fp8_act_quant_cuda: codes + per-128 scales, both scale orders), FP4
// QDQ, and the Hadamard alone and followed by FP4 (the indexer path).
#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_check_util.h"

#include <algorithm>
#include <cmath>

namespace hart::op_check_detail {
namespace {

// n values in blocks of `block`, each block N(0, 1) times 2^U(-20, 20), and
// some special blocks: an all-zero block, a NaN, +-inf, a subnormal, -0.
std::vector<float> binade_blocks(std::mt19937& rng, int64_t n, int64_t block) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::uniform_int_distribution<int64_t> pick(0, block - 1);
  std::vector<float> x(n);
  for (int64_t b = 0; b < n / block; ++b) {
    const float s = std::ldexp(1.0f, ex(rng));
    float* xb = x.data() + b * block;
    for (int64_t i = 0; i < block; ++i) xb[i] = nd(rng) * s;
    switch (b % 16) {
      case 3:
        std::fill(xb, xb + block, 0.0f);
        break;
      case 5:
        xb[pick(rng)] = NAN;
        break;
      case 7:
        xb[pick(rng)] = (b & 16) ? INFINITY : -INFINITY;
        break;
      case 9:
        xb[pick(rng)] = std::ldexp(1.0f, -140);
        xb[pick(rng)] = -0.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

std::string act_shape(int64_t n, int64_t block) {
  return "n=" + std::to_string(n) + " block=" + std::to_string(block);
}

status sync(const char* what) {
  return cuda_status(what, cudaDeviceSynchronize());
}

// Rows of `in` (row stride in + 8) as codes + one scale per row per 128
// channels (the last block shorter), scales [n_rows][in/128] or block-major.
status act_fp8_rows(std::mt19937& rng, int64_t n_rows, int64_t in, bool block_major,
                    std::vector<op_check_line>& lines) {
  const int64_t xs = in + 8, n_blocks = (in + 127) / 128;
  auto x = binade_blocks(rng, n_rows * xs, xs);        // a row per binade; zero rows, subnormals, -0
  for (float& v : x) v = std::isfinite(v) ? v : 1.0f;  // the engine's activations are finite
  std::vector<uint8_t> q_cpu(size_t(n_rows * in)), q_gpu;
  std::vector<float> sc_cpu(size_t(n_rows * n_blocks)), sc_gpu;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t len = std::min<int64_t>(128, in - b * 128);
      float* scale = sc_cpu.data() + (block_major ? b * n_rows + r : r * n_blocks + b);
      HART_RETURN_IF_ERROR(
          act_quant_fp8(x.data() + r * xs + b * 128, len, len, q_cpu.data() + r * in + b * 128, scale));
    }
  }
  dev<float> d_x(x), d_sc(std::vector<float>(sc_cpu.size(), NAN));
  dev<uint8_t> d_q(std::vector<uint8_t>(q_cpu.size(), 0xa5));
  HART_RETURN_IF_ERROR(d_q.ok());
  HART_RETURN_IF_ERROR(d_sc.ok());
  HART_RETURN_IF_ERROR(
      fp8_act_quant_cuda(d_x.get(), xs, d_q.get(), d_sc.get(), n_rows, in, nullptr, block_major));
  HART_RETURN_IF_ERROR(sync("fp8_act_quant"));
  HART_RETURN_IF_ERROR(d_q.to_host(q_gpu));
  HART_RETURN_IF_ERROR(d_sc.to_host(sc_gpu));
  const std::string shape = "n_rows=" + std::to_string(n_rows) + " in=" + std::to_string(in) +
                            (block_major ? " block-major" : " row-major");
  lines.push_back(compare_codes("quant_fp8_act_codes", shape, q_gpu, q_cpu));
  lines.push_back(compare_bits("quant_fp8_act_scales", shape, sc_gpu, sc_cpu));
  return {};
}

status act_fp4(std::mt19937& rng, int64_t n, int64_t block, std::vector<op_check_line>& lines) {
  const auto x = binade_blocks(rng, n, block);
  std::vector<float> cpu = x, gpu;
  HART_RETURN_IF_ERROR(fp4_act_qdq(cpu.data(), n, block));
  dev<float> d_x(x);
  HART_RETURN_IF_ERROR(d_x.ok());
  HART_RETURN_IF_ERROR(fp4_act_qdq_cuda(d_x.get(), n, block, nullptr));
  HART_RETURN_IF_ERROR(sync("fp4_act_qdq"));
  HART_RETURN_IF_ERROR(d_x.to_host(gpu));
  lines.push_back(compare_bits("quant_act_fp4_qdq", act_shape(n, block), gpu, cpu));
  return {};
}

// Hadamard (scale n^-0.5) on rows of n, then FP4 QDQ block 32 when n >= 32.
status hadamard(std::mt19937& rng, int64_t n_rows, int64_t n, std::vector<op_check_line>& lines) {
  const auto x = normal(rng, n_rows * n, 1.0f);
  const float scale = 1.0f / std::sqrt(float(n));
  std::vector<float> cpu = x, gpu;
  for (int64_t r = 0; r < n_rows; ++r) HART_RETURN_IF_ERROR(hadamard_transform(cpu.data() + r * n, n, scale));
  dev<float> d_x(x);
  HART_RETURN_IF_ERROR(d_x.ok());
  HART_RETURN_IF_ERROR(hadamard_transform_cuda(d_x.get(), n_rows, n, scale, nullptr));
  HART_RETURN_IF_ERROR(sync("hadamard_transform"));
  HART_RETURN_IF_ERROR(d_x.to_host(gpu));
  const std::string shape = "n_rows=" + std::to_string(n_rows) + " n=" + std::to_string(n);
  lines.push_back(compare_bits("quant_hadamard", shape, gpu, cpu));
  if (n < 32) return {};
  HART_RETURN_IF_ERROR(fp4_act_qdq(cpu.data(), n_rows * n, 32));
  HART_RETURN_IF_ERROR(fp4_act_qdq_cuda(d_x.get(), n_rows * n, 32, nullptr));
  HART_RETURN_IF_ERROR(sync("hadamard + fp4_act_qdq"));
  HART_RETURN_IF_ERROR(d_x.to_host(gpu));
  lines.push_back(compare_bits("quant_hadamard_fp4", shape + " block=32", gpu, cpu));
  return {};
}

}  // namespace

status check_quant(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "quant");
  // The tensor-core linears' inputs: 64 tokens x hidden 4096 (the MoE's rows),
  // block-major for cuBLASLt; odd: in off the 128 grid (a shorter last block).
  HART_RETURN_IF_ERROR(act_fp8_rows(rng, 64, 4096, false, lines));
  HART_RETURN_IF_ERROR(act_fp8_rows(rng, 516, 1024, true, lines));
  HART_RETURN_IF_ERROR(act_fp8_rows(rng, 7, 1000, false, lines));
  // FP4: indexer q (64 heads x 128) for 16 tokens per 32; odd: 37 blocks of 19
  HART_RETURN_IF_ERROR(act_fp4(rng, 16 * 64 * 128, 32, lines));
  HART_RETURN_IF_ERROR(act_fp4(rng, 37 * 19, 19, lines));
  // Hadamard: indexer head_dim 128 over 16 tokens x 64 heads; the largest n; odd: n = 2, 7 rows
  HART_RETURN_IF_ERROR(hadamard(rng, 16 * 64, 128, lines));
  HART_RETURN_IF_ERROR(hadamard(rng, 3, 4096, lines));
  HART_RETURN_IF_ERROR(hadamard(rng, 7, 2, lines));
  return {};
}

}  // namespace hart::op_check_detail
