// quant: every CUDA quantizer vs its CPU rule, bit for bit (kernels/quant/
// quant_test.cpp "CUDA parity: bit-exact": integer-ported codecs, power-of-two
// scales, single IEEE roundings, the same fp64 Hadamard butterflies; any two
// NaNs match). Covers activation FP8 QDQ and codes + scales + dequantize, FP4
// QDQ, the Hadamard (alone and followed by FP4, the indexer path), e4m3 weight
// 128x128 block quantize / dequantize and MXFP4 quantize / dequantize.
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
std::string mat_shape(int64_t rows, int64_t cols) {
  return "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
}

status sync(const char* what) {
  return cuda_status(what, cudaDeviceSynchronize());
}

status act_fp8(std::mt19937& rng, int64_t n, int64_t block, std::vector<op_check_line>& lines) {
  const auto x = binade_blocks(rng, n, block);
  // QDQ in place
  std::vector<float> cpu = x, gpu;
  HART_RETURN_IF_ERROR(act_quant_fp8_qdq(cpu.data(), n, block));
  dev<float> d_x(x);
  HART_RETURN_IF_ERROR(d_x.ok());
  HART_RETURN_IF_ERROR(act_quant_fp8_qdq_cuda(d_x.get(), n, block, nullptr));
  HART_RETURN_IF_ERROR(sync("act_quant_fp8_qdq"));
  HART_RETURN_IF_ERROR(d_x.to_host(gpu));
  lines.push_back(compare_bits("quant_act_fp8_qdq", act_shape(n, block), gpu, cpu));
  // codes + scales, then the CPU codes dequantized on the device
  std::vector<uint8_t> q_cpu(n), q_gpu;
  std::vector<float> sc_cpu(n / block), sc_gpu;
  HART_RETURN_IF_ERROR(act_quant_fp8(x.data(), n, block, q_cpu.data(), sc_cpu.data()));
  dev<float> d_in(x), d_sc(std::vector<float>(sc_cpu.size(), NAN));
  dev<uint8_t> d_q(std::vector<uint8_t>(n, 0xa5));
  HART_RETURN_IF_ERROR(d_q.ok());
  HART_RETURN_IF_ERROR(act_quant_fp8_cuda(d_in.get(), n, block, d_q.get(), d_sc.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("act_quant_fp8"));
  HART_RETURN_IF_ERROR(d_q.to_host(q_gpu));
  HART_RETURN_IF_ERROR(d_sc.to_host(sc_gpu));
  lines.push_back(compare_codes("quant_act_fp8_codes", act_shape(n, block), q_gpu, q_cpu));
  lines.push_back(compare_bits("quant_act_fp8_scales", act_shape(n, block), sc_gpu, sc_cpu));
  std::vector<float> deq_cpu(n), deq_gpu;
  HART_RETURN_IF_ERROR(act_dequant_fp8(q_cpu.data(), sc_cpu.data(), n, block, deq_cpu.data()));
  dev<uint8_t> d_qc(q_cpu);
  dev<float> d_scc(sc_cpu), d_out(std::vector<float>(n, NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  HART_RETURN_IF_ERROR(act_dequant_fp8_cuda(d_qc.get(), d_scc.get(), n, block, d_out.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("act_dequant_fp8"));
  HART_RETURN_IF_ERROR(d_out.to_host(deq_gpu));
  lines.push_back(compare_bits("quant_act_fp8_dequant", act_shape(n, block), deq_gpu, deq_cpu));
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

status fp8_weights(std::mt19937& rng, int64_t rows, int64_t cols, std::vector<op_check_line>& lines) {
  const int64_t block = 128, n = rows * cols;
  const int64_t n_sc = ((rows + block - 1) / block) * ((cols + block - 1) / block);
  auto w = normal(rng, n, 0.02f);  // weight-like, with a few outliers
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int i = 0; i < 16; ++i) w[pick(rng)] *= 300.0f;
  std::vector<uint8_t> q_cpu(n), sc_cpu(n_sc), q_gpu, sc_gpu;
  HART_RETURN_IF_ERROR(fp8_block_quantize(w.data(), rows, cols, block, q_cpu.data(), sc_cpu.data()));
  dev<float> d_w(w);
  dev<uint8_t> d_q(std::vector<uint8_t>(n, 0xa5)), d_sc(std::vector<uint8_t>(n_sc, 0xa5));
  HART_RETURN_IF_ERROR(d_sc.ok());
  HART_RETURN_IF_ERROR(fp8_block_quantize_cuda(d_w.get(), rows, cols, block, d_q.get(), d_sc.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("fp8_block_quantize"));
  HART_RETURN_IF_ERROR(d_q.to_host(q_gpu));
  HART_RETURN_IF_ERROR(d_sc.to_host(sc_gpu));
  const std::string shape = mat_shape(rows, cols) + " block=128";
  lines.push_back(compare_codes("quant_fp8_block_codes", shape, q_gpu, q_cpu));
  lines.push_back(compare_codes("quant_fp8_block_scales", shape, sc_gpu, sc_cpu));
  std::vector<float> deq_cpu(n), deq_gpu;
  HART_RETURN_IF_ERROR(fp8_block_dequantize(q_cpu.data(), sc_cpu.data(), rows, cols, block, deq_cpu.data()));
  dev<uint8_t> d_qc(q_cpu), d_scc(sc_cpu);
  dev<float> d_out(std::vector<float>(n, NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  HART_RETURN_IF_ERROR(
      fp8_block_dequantize_cuda(d_qc.get(), d_scc.get(), rows, cols, block, d_out.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("fp8_block_dequantize"));
  HART_RETURN_IF_ERROR(d_out.to_host(deq_gpu));
  lines.push_back(compare_bits("quant_fp8_block_dequant", shape, deq_gpu, deq_cpu));
  return {};
}

status mxfp4(std::mt19937& rng, int64_t rows, int64_t cols, std::vector<op_check_line>& lines) {
  const int64_t n = rows * cols;
  auto w = binade_blocks(rng, n, 32);
  for (float& v : w) v = std::isfinite(v) ? v : 1.0f;  // the CPU rejects non-finite weights
  std::vector<uint8_t> p_cpu(n / 2), sc_cpu(n / 32), p_gpu, sc_gpu;
  HART_RETURN_IF_ERROR(mxfp4_quantize(w.data(), rows, cols, p_cpu.data(), sc_cpu.data()));
  dev<float> d_w(w);
  dev<uint8_t> d_p(std::vector<uint8_t>(n / 2, 0xa5)), d_sc(std::vector<uint8_t>(n / 32, 0xa5));
  HART_RETURN_IF_ERROR(d_sc.ok());
  HART_RETURN_IF_ERROR(mxfp4_quantize_cuda(d_w.get(), rows, cols, d_p.get(), d_sc.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("mxfp4_quantize"));
  HART_RETURN_IF_ERROR(d_p.to_host(p_gpu));
  HART_RETURN_IF_ERROR(d_sc.to_host(sc_gpu));
  const std::string shape = mat_shape(rows, cols);
  lines.push_back(compare_codes("quant_mxfp4_codes", shape, p_gpu, p_cpu));
  lines.push_back(compare_codes("quant_mxfp4_scales", shape, sc_gpu, sc_cpu));
  std::vector<float> deq_cpu(n), deq_gpu;
  HART_RETURN_IF_ERROR(mxfp4_dequantize(p_cpu.data(), sc_cpu.data(), rows, cols, deq_cpu.data()));
  dev<uint8_t> d_pc(p_cpu), d_scc(sc_cpu);
  dev<float> d_out(std::vector<float>(n, NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  HART_RETURN_IF_ERROR(mxfp4_dequantize_cuda(d_pc.get(), d_scc.get(), rows, cols, d_out.get(), nullptr));
  HART_RETURN_IF_ERROR(sync("mxfp4_dequantize"));
  HART_RETURN_IF_ERROR(d_out.to_host(deq_gpu));
  lines.push_back(compare_bits("quant_mxfp4_dequant", shape, deq_gpu, deq_cpu));
  return {};
}

}  // namespace

status check_quant(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "quant");
  // activations: 64 tokens x hidden 4096 per 128; window KV's 448 NoPE dims per
  // 64 over 128 entries; odd: 111 blocks of 19
  HART_RETURN_IF_ERROR(act_fp8(rng, 64 * 4096, 128, lines));
  HART_RETURN_IF_ERROR(act_fp8(rng, 128 * 448, 64, lines));
  HART_RETURN_IF_ERROR(act_fp8(rng, 111 * 19, 19, lines));
  // FP4: indexer q (64 heads x 128) for 16 tokens per 32; odd: 37 blocks of 19
  HART_RETURN_IF_ERROR(act_fp4(rng, 16 * 64 * 128, 32, lines));
  HART_RETURN_IF_ERROR(act_fp4(rng, 37 * 19, 19, lines));
  // Hadamard: indexer head_dim 128 over 16 tokens x 64 heads; the largest n; odd: n = 2, 7 rows
  HART_RETURN_IF_ERROR(hadamard(rng, 16 * 64, 128, lines));
  HART_RETURN_IF_ERROR(hadamard(rng, 3, 4096, lines));
  HART_RETURN_IF_ERROR(hadamard(rng, 7, 2, lines));
  // e4m3 weights: q_lora 1024 x hidden 4096; odd: partial edge tiles
  HART_RETURN_IF_ERROR(fp8_weights(rng, 1024, 4096, lines));
  HART_RETURN_IF_ERROR(fp8_weights(rng, 300, 1000, lines));
  // MXFP4 experts: moe_intermediate 2048 x hidden 4096; odd: 37 x 96
  HART_RETURN_IF_ERROR(mxfp4(rng, 2048, 4096, lines));
  HART_RETURN_IF_ERROR(mxfp4(rng, 37, 96, lines));
  return {};
}

}  // namespace hart::op_check_detail
