// linear: every path the engine's linears take (runtime/gpu/gpu_engine.cpp
// linear_run), each against linear_cpu / linear_grouped_cpu on the values it
// multiplies, as a fraction of Σ|x·w| per output:
//   fp32 (cuBLASLt)                        linear_cuda          2e-5
//   bf16 weights: GEMV to 64 rows, then    linear_bf16w_cuda    2e-5
//     cuBLASLt on widened chunks
//   fp8, 1 row / in % 128 != 0 (CUDA cores) linear_fp8_cuda     2e-5
//   fp8, 2+ rows (mma.sync e4m3)           linear_fp8_tc_cuda   2^-12 (the MMA's block sums)
//   fp8, 512+ rows (cuBLASLt block-scaled) linear_fp8_lt_cuda   2^-10 (Hopper's FP8 accumulator)
//   FP8 weights on raw inputs (wo_a)       linear_fp8_raw_tc_cuda 2^-16
//   MoE experts, CUDA cores                linear_grouped_cuda  2e-5
//   MoE experts, tensor cores (narrow and  linear_grouped_tc_cuda 2^-12, x from fp8_act_quant_cuda
//     wide tiles; FP8 and MXFP4 groups)
// (the bounds and their reasons: kernels/linear/linear_cuda_test.cpp and
// linear_grouped_test.cpp; a wrong tile, stride or scale is O(1)).
#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <memory>

namespace hart::op_check_detail {
namespace {

struct shape {
  int64_t n_rows, in, out;
  std::string text() const {
    return "n_rows=" + std::to_string(n_rows) + " in=" + std::to_string(in) + " out=" + std::to_string(out);
  }
};

// Σ_i |x[r][i]·w[o][i]| per output.
std::vector<double> magnitude(const std::vector<float>& x, const std::vector<float>& w, const shape& s) {
  std::vector<double> m(s.n_rows * s.out, 0.0);
  for (int64_t r = 0; r < s.n_rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double a = 0;
      for (int64_t i = 0; i < s.in; ++i) a += std::fabs(double(x[r * s.in + i]) * w[o * s.in + i]);
      m[r * s.out + o] = a;
    }
  }
  return m;
}

// fp32 weights, or bf16 weights (the CPU sees the bf16 values widened) on fp32 x.
status dense(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, bool bf16w,
             std::vector<op_check_line>& lines) {
  const auto x = normal(rng, s.n_rows * s.in, 1.0f);
  auto w = normal(rng, s.out * s.in, 1.0f);
  std::vector<uint16_t> wb(w.size());
  f32_to_bf16(w.data(), wb.data(), int64_t(w.size()));
  if (bf16w) bf16_to_f32(wb.data(), w.data(), int64_t(w.size()));
  std::vector<float> cpu(s.n_rows * s.out), gpu;
  HART_RETURN_IF_ERROR(linear_cpu({x.data(), w.data(), cpu.data(), s.n_rows, s.in, s.out}));
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  HART_RETURN_IF_ERROR(d_y.ok());
  if (bf16w) {
    dev<uint16_t> d_w(wb);
    HART_RETURN_IF_ERROR(
        linear_bf16w_cuda({d_x.get(), d_w.get(), d_y.get(), s.n_rows, s.in, s.out}, ctx, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("linear_bf16w", cudaDeviceSynchronize()));
  } else {
    dev<float> d_w(w);
    HART_RETURN_IF_ERROR(linear_cuda({d_x.get(), d_w.get(), d_y.get(), s.n_rows, s.in, s.out}, ctx, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("linear_f32", cudaDeviceSynchronize()));
  }
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  lines.push_back(compare(bf16w ? "linear_bf16w" : "linear_f32", s.text(), gpu,
                          std::vector<double>(cpu.begin(), cpu.end()), magnitude(x, w, s), 2e-5, 0.0,
                          "2e-05 * sum|x*w|"));
  return {};
}

// A random [out][in] FP8 weight: codes, e8m0 scales and the dequantized values.
struct fp8_weight {
  std::vector<uint8_t> q, scale;
  std::vector<float> deq;
};

status random_fp8_weight(std::mt19937& rng, int64_t out, int64_t in, fp8_weight* w) {
  const auto raw = normal(rng, out * in, 0.05f);
  w->q.resize(raw.size());
  w->scale.resize(size_t(((out + 127) / 128) * ((in + 127) / 128)));
  w->deq.resize(raw.size());
  HART_RETURN_IF_ERROR(fp8_block_quantize(raw.data(), out, in, 128, w->q.data(), w->scale.data()));
  return fp8_block_dequantize(w->q.data(), w->scale.data(), out, in, 128, w->deq.data());
}

// An MXFP4 expert as the engine keeps the release checkpoints': pairs in the grouped linear's order.
status random_mxfp4_weight(std::mt19937& rng, int64_t out, int64_t in, fp8_weight* w) {
  const auto raw = normal(rng, out * in, 0.05f);
  w->q.resize(raw.size() / 2);
  w->scale.resize(raw.size() / 32);
  w->deq.resize(raw.size());
  HART_RETURN_IF_ERROR(mxfp4_quantize(raw.data(), out, in, w->q.data(), w->scale.data()));
  HART_RETURN_IF_ERROR(mxfp4_dequantize(w->q.data(), w->scale.data(), out, in, w->deq.data()));
  return mxfp4_mma_order(w->q.data(), out, in, w->q.data());
}

// x QDQ'd per row per 128 channels (the last block shorter): the CPU's fp8 rule.
status qdq_rows(std::vector<float>& x, int64_t n_rows, int64_t in) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < in; b += 128) {
      const int64_t len = std::min<int64_t>(128, in - b);
      HART_RETURN_IF_ERROR(act_quant_fp8_qdq(x.data() + r * in + b, len, len));
    }
  }
  return {};
}

enum class fp8_path { cuda_cores, tensor_cores, cublaslt };

// The fp8 mode's linear (inputs quantized on the device) on one path.
status fp8(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, fp8_path path,
           std::vector<op_check_line>& lines) {
  const auto x = normal(rng, s.n_rows * s.in, 1.0f);
  fp8_weight w;
  HART_RETURN_IF_ERROR(random_fp8_weight(rng, s.out, s.in, &w));
  std::vector<float> xq = x;
  HART_RETURN_IF_ERROR(qdq_rows(xq, s.n_rows, s.in));
  std::vector<float> cpu(s.n_rows * s.out), gpu;
  HART_RETURN_IF_ERROR(linear_cpu({xq.data(), w.deq.data(), cpu.data(), s.n_rows, s.in, s.out}));
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  dev<uint8_t> d_w(w.q), d_s(w.scale);
  HART_RETURN_IF_ERROR(d_y.ok());
  const linear_fp8_params p{d_x.get(), d_w.get(), d_s.get(), d_y.get(), s.n_rows, s.in, s.out};
  const char* op = path == fp8_path::cuda_cores     ? "linear_fp8"
                   : path == fp8_path::tensor_cores ? "linear_fp8_tc"
                                                    : "linear_fp8_lt";
  if (path == fp8_path::cuda_cores) HART_RETURN_IF_ERROR(linear_fp8_cuda(p, ctx, nullptr));
  if (path == fp8_path::tensor_cores) HART_RETURN_IF_ERROR(linear_fp8_tc_cuda(p, ctx, nullptr));
  if (path == fp8_path::cublaslt) HART_RETURN_IF_ERROR(linear_fp8_lt_cuda(p, ctx, nullptr));
  HART_RETURN_IF_ERROR(cuda_status(op, cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  const double tol = path == fp8_path::cuda_cores ? 2e-5 : path == fp8_path::tensor_cores ? 0x1p-12 : 0x1p-10;
  lines.push_back(compare(op, s.text(), gpu, std::vector<double>(cpu.begin(), cpu.end()),
                          magnitude(xq, w.deq, s), tol, 0.0,
                          path == fp8_path::cuda_cores     ? "2e-05 * sum|x'*w'| (QDQ x)"
                          : path == fp8_path::tensor_cores ? "2^-12 * sum|x'*w'| (QDQ x)"
                                                           : "2^-10 * sum|x'*w'| (QDQ x)"));
  return {};
}

// wo_a: FP8 weight values on unquantized inputs, `groups` output groups each
// reading its own slice of the row, on tensor cores.
status fp8_raw(std::mt19937& rng, linear_cuda_context& ctx, int64_t groups, int64_t rows, int64_t in,
               int64_t n_rows, std::vector<op_check_line>& lines) {
  const int64_t out = groups * rows, xs = groups * in;
  fp8_weight w;
  HART_RETURN_IF_ERROR(random_fp8_weight(rng, out, in, &w));
  const auto x = normal(rng, n_rows * xs, 1.0f);
  std::vector<float> cpu(size_t(n_rows * out)), gpu;
  std::vector<double> mag(cpu.size());
  for (int64_t g = 0; g < groups; ++g) {  // group g: rows [g·rows, (g+1)·rows) of W on x[:, g·in, (g+1)·in)
    const shape sg{n_rows, in, rows};
    std::vector<float> xg(size_t(n_rows * in)), yg(size_t(n_rows * rows));
    for (int64_t r = 0; r < n_rows; ++r) std::copy_n(x.data() + r * xs + g * in, in, xg.data() + r * in);
    const std::vector<float> wg(w.deq.begin() + g * rows * in, w.deq.begin() + (g + 1) * rows * in);
    HART_RETURN_IF_ERROR(linear_cpu({xg.data(), wg.data(), yg.data(), n_rows, in, rows}));
    const std::vector<double> mg = magnitude(xg, wg, sg);
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t o = 0; o < rows; ++o) {
        cpu[size_t(r * out + g * rows + o)] = yg[size_t(r * rows + o)];
        mag[size_t(r * out + g * rows + o)] = mg[size_t(r * rows + o)];
      }
    }
  }
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  dev<uint8_t> d_w(w.q), d_s(w.scale);
  HART_RETURN_IF_ERROR(d_y.ok());
  linear_fp8_params p{d_x.get(), d_w.get(), d_s.get(), d_y.get(), n_rows, in, out, xs, out};
  p.quantize_input = false;
  if (groups > 1) {
    p.x_group_rows = rows;
    p.x_group_stride = in;
  }
  HART_RETURN_IF_ERROR(linear_fp8_raw_tc_cuda(p, ctx, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("linear_fp8_raw_tc", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  lines.push_back(compare("linear_fp8_raw_tc",
                          "groups=" + std::to_string(groups) + " n_rows=" + std::to_string(n_rows) +
                              " in=" + std::to_string(in) + " out=" + std::to_string(out),
                          gpu, std::vector<double>(cpu.begin(), cpu.end()), mag, 0x1p-16, 0.0,
                          "2^-16 * sum|x*w'|"));
  return {};
}

// Six groups (e4m3 and fp32 alternating) of 1..8 rows each, one tile per group, x already QDQ'd.
status grouped(std::mt19937& rng, std::vector<op_check_line>& lines) {
  const int64_t in = 4096, out = 512, n_groups = 6;
  std::vector<std::vector<uint8_t>> q(n_groups), sc(n_groups);
  std::vector<std::vector<float>> f(n_groups), deq(n_groups);
  std::vector<int32_t> tile_group, tile_row0, tile_rows;
  int32_t rows = 0;
  for (int32_t g = 0; g < n_groups; ++g) {
    const auto w = normal(rng, out * in, 0.05f);
    if (g % 2 == 0) {
      q[g].resize(w.size());
      sc[g].resize(size_t(((out + 127) / 128) * ((in + 127) / 128)));
      deq[g].resize(w.size());
      HART_RETURN_IF_ERROR(fp8_block_quantize(w.data(), out, in, 128, q[g].data(), sc[g].data()));
      HART_RETURN_IF_ERROR(fp8_block_dequantize(q[g].data(), sc[g].data(), out, in, 128, deq[g].data()));
    } else {
      f[g] = w;
      deq[g] = w;
    }
    tile_group.push_back(g);
    tile_row0.push_back(rows);
    tile_rows.push_back(1 + g);
    rows += 1 + g;
  }
  std::vector<float> x = normal(rng, rows * in, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < in; b += 128)
      HART_RETURN_IF_ERROR(act_quant_fp8_qdq(x.data() + r * in + b, 128, 128));
  }
  std::vector<linear_group_weight> hg(n_groups), dg(n_groups);
  std::vector<std::unique_ptr<dev<uint8_t>>> dq, ds;
  std::vector<std::unique_ptr<dev<float>>> df;
  for (int32_t g = 0; g < n_groups; ++g) {
    if (g % 2 == 0) {
      hg[g] = {q[g].data(), sc[g].data()};
      dq.push_back(std::make_unique<dev<uint8_t>>(q[g]));
      ds.push_back(std::make_unique<dev<uint8_t>>(sc[g]));
      dg[g] = {dq.back()->get(), ds.back()->get()};
    } else {
      hg[g] = {f[g].data(), nullptr};
      df.push_back(std::make_unique<dev<float>>(f[g]));
      dg[g] = {df.back()->get(), nullptr};
    }
  }
  const int32_t n_tiles = int32_t(n_groups);
  std::vector<float> cpu(size_t(rows * out)), gpu;
  HART_RETURN_IF_ERROR(
      linear_grouped_cpu({x.data(), cpu.data(), hg.data(), n_groups, tile_group.data(), tile_row0.data(),
                          tile_rows.data(), &n_tiles, n_tiles, rows, in, out}));
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  dev<linear_group_weight> d_g(dg);
  dev<int32_t> d_tg(tile_group), d_tr(tile_row0), d_tn(tile_rows), d_n(std::vector<int32_t>{n_tiles});
  HART_RETURN_IF_ERROR(d_y.ok());
  HART_RETURN_IF_ERROR(linear_grouped_cuda({d_x.get(), d_y.get(), d_g.get(), n_groups, d_tg.get(), d_tr.get(),
                                            d_tn.get(), d_n.get(), n_tiles, rows, in, out},
                                           nullptr));
  HART_RETURN_IF_ERROR(cuda_status("linear_grouped", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  std::vector<double> mag(cpu.size(), 0.0);
  for (int32_t g = 0; g < n_groups; ++g) {
    for (int32_t r = tile_row0[g]; r < tile_row0[g] + tile_rows[g]; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double a = 0;
        for (int64_t i = 0; i < in; ++i) a += std::fabs(double(x[r * in + i]) * deq[g][o * in + i]);
        mag[size_t(r * out + o)] = a;
      }
    }
  }
  lines.push_back(compare("linear_grouped", "groups=6 (fp8, fp32) rows=21 in=4096 out=512", gpu,
                          std::vector<double>(cpu.begin(), cpu.end()), mag, 2e-5, 0.0, "2e-05 * sum|x'*w|"));
  return {};
}

// The experts on tensor cores: every group e4m3 (or MXFP4, `mxfp4`), tiles of
// up to `tile_rows` rows (8: decode's narrow tiles; up to 64: prefill's wide
// ones), x as codes + scales from fp8_act_quant_cuda (codes · scale is the
// CPU's QDQ bitwise).
status grouped_tc(std::mt19937& rng, const std::vector<int32_t>& rows_per_tile, int64_t tile_rows, bool mxfp4,
                  std::vector<op_check_line>& lines) {
  const int64_t in = 1024, out = 512, n_groups = int64_t(rows_per_tile.size());
  std::vector<fp8_weight> w(static_cast<size_t>(n_groups));
  std::vector<int32_t> tile_group, tile_row0;
  int32_t rows = 0;
  for (int32_t g = 0; g < int32_t(n_groups); ++g) {
    HART_RETURN_IF_ERROR(mxfp4 ? random_mxfp4_weight(rng, out, in, &w[size_t(g)])
                               : random_fp8_weight(rng, out, in, &w[size_t(g)]));
    tile_group.push_back(g);
    tile_row0.push_back(rows);
    rows += rows_per_tile[size_t(g)];
  }
  const std::vector<float> x = normal(rng, size_t(rows) * in, 1.0f);
  std::vector<float> xq = x;
  HART_RETURN_IF_ERROR(qdq_rows(xq, rows, in));
  std::vector<linear_group_weight> hg, dg;
  std::vector<std::unique_ptr<dev<uint8_t>>> dq, ds;
  for (const fp8_weight& g : w) {
    hg.push_back({g.q.data(), g.scale.data()});
    dq.push_back(std::make_unique<dev<uint8_t>>(g.q));
    ds.push_back(std::make_unique<dev<uint8_t>>(g.scale));
    dg.push_back({dq.back()->get(), ds.back()->get()});
  }
  const int32_t n_tiles = int32_t(n_groups);
  std::vector<float> cpu(size_t(rows * out)), gpu;
  linear_grouped_params hp{xq.data(),
                           cpu.data(),
                           hg.data(),
                           n_groups,
                           tile_group.data(),
                           tile_row0.data(),
                           rows_per_tile.data(),
                           &n_tiles,
                           n_tiles,
                           rows,
                           in,
                           out};
  hp.max_tile_rows = tile_rows;
  hp.w_mxfp4 = mxfp4;
  HART_RETURN_IF_ERROR(linear_grouped_cpu(hp));
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  dev<float> d_scales(std::vector<float>(size_t(rows * in / 128), 0.0f));
  dev<uint8_t> d_codes(std::vector<uint8_t>(size_t(rows * in), 0));
  dev<linear_group_weight> d_g(dg);
  dev<int32_t> d_tg(tile_group), d_tr(tile_row0), d_tn(rows_per_tile), d_n(std::vector<int32_t>{n_tiles});
  HART_RETURN_IF_ERROR(d_y.ok());
  HART_RETURN_IF_ERROR(fp8_act_quant_cuda(d_x.get(), in, d_codes.get(), d_scales.get(), rows, in, nullptr));
  linear_grouped_params p{nullptr,    d_y.get(), d_g.get(), n_groups, d_tg.get(), d_tr.get(),
                          d_tn.get(), d_n.get(), n_tiles,   rows,     in,         out};
  p.max_tile_rows = tile_rows;
  p.x_codes = d_codes.get();
  p.x_scales = d_scales.get();
  p.w_mxfp4 = mxfp4;
  HART_RETURN_IF_ERROR(linear_grouped_tc_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("linear_grouped_tc", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  std::vector<double> mag(cpu.size(), 0.0);
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int32_t r = tile_row0[size_t(g)]; r < tile_row0[size_t(g)] + rows_per_tile[size_t(g)]; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double a = 0;
        for (int64_t i = 0; i < in; ++i)
          a += std::fabs(double(xq[size_t(r * in + i)]) * w[size_t(g)].deq[size_t(o * in + i)]);
        mag[size_t(r * out + o)] = a;
      }
    }
  }
  lines.push_back(compare(
      "linear_grouped_tc",
      std::string(mxfp4 ? "MXFP4 " : "") + "groups=" + std::to_string(n_groups) +
          " rows=" + std::to_string(rows) + " tiles<=" + std::to_string(tile_rows) + " in=1024 out=512",
      gpu, std::vector<double>(cpu.begin(), cpu.end()), mag, 0x1p-12, 0.0, "2^-12 * sum|x'*w'| (QDQ x)"));
  return {};
}

}  // namespace

status check_linear(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "linear");
  auto ctx = linear_cuda_context::create(640, 4096);
  if (!ctx.ok()) return ctx.get_status();
  linear_cuda_context& c = **ctx;
  // fp32 and bf16 weights: decode rows, and prefill rows past the bf16 GEMV's 64 with in off the 16/128 grid.
  for (const shape& s : {shape{4, 4096, 1024}, shape{130, 1000, 300}}) {
    HART_RETURN_IF_ERROR(dense(rng, c, s, false, lines));
    HART_RETURN_IF_ERROR(dense(rng, c, s, true, lines));
  }
  HART_RETURN_IF_ERROR(dense(rng, c, shape{1, 4096, 1024}, true, lines));
  // CUDA cores: 1 row, and any rows where in % 128 != 0.
  for (const shape& s : {shape{1, 4096, 1024}, shape{64, 1000, 300}}) {
    HART_RETURN_IF_ERROR(fp8(rng, c, s, fp8_path::cuda_cores, lines));
  }
  // mma.sync: 2 rows (split K), a row count not a multiple of 4, a prefill chunk under 512.
  for (const shape& s : {shape{2, 4096, 1024}, shape{131, 1024, 2048}, shape{300, 512, 384}}) {
    HART_RETURN_IF_ERROR(fp8(rng, c, s, fp8_path::tensor_cores, lines));
  }
  // cuBLASLt from 512 rows: a tail past a multiple of 4 (to mma.sync), and 3
  // input blocks with several 128-row weight blocks (its padded scale rows).
  for (const shape& s : {shape{517, 1024, 512}, shape{600, 384, 1024}}) {
    HART_RETURN_IF_ERROR(fp8(rng, c, s, fp8_path::cublaslt, lines));
  }
  // wo_a: 8 groups as at Flash (smaller), and one group.
  HART_RETURN_IF_ERROR(fp8_raw(rng, c, 8, 128, 512, 3, lines));
  HART_RETURN_IF_ERROR(fp8_raw(rng, c, 1, 256, 1024, 40, lines));
  HART_RETURN_IF_ERROR(grouped(rng, lines));
  for (const bool mxfp4 : {false, true}) {
    HART_RETURN_IF_ERROR(grouped_tc(rng, {1, 3, 8, 2, 5}, linear_grouped_tile_rows, mxfp4, lines));
    HART_RETURN_IF_ERROR(grouped_tc(rng, {20, 64, 33}, linear_grouped_wide_tile_rows, mxfp4, lines));
  }
  return {};
}

}  // namespace hart::op_check_detail
