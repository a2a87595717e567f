// linear: fp32 and bf16 (cuBLASLt) and fp8 (e4m3 weights, 128x128 scales,
// on-device activation QDQ) vs linear_cpu, and the grouped linear (MoE experts:
// e4m3 and fp32 groups in one call) vs linear_grouped_cpu, within 2e-5·Σ|x·w|
// (each side within 1e-5·Σ|x·w| of the exact sum; see kernels/linear/*_test.cpp).
#include <algorithm>
#include <memory>

#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

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

status dense(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, bool bf16, std::vector<op_check_line>& lines) {
  auto x = normal(rng, s.n_rows * s.in, 1.0f), w = normal(rng, s.out * s.in, 1.0f);
  std::vector<uint16_t> xb(x.size()), wb(w.size());
  f32_to_bf16(x.data(), xb.data(), int64_t(x.size()));
  f32_to_bf16(w.data(), wb.data(), int64_t(w.size()));
  if (bf16) {  // the CPU sees the bf16 values
    bf16_to_f32(xb.data(), x.data(), int64_t(x.size()));
    bf16_to_f32(wb.data(), w.data(), int64_t(w.size()));
  }
  std::vector<float> cpu(s.n_rows * s.out), gpu;
  HART_RETURN_IF_ERROR(linear_cpu({x.data(), w.data(), cpu.data(), s.n_rows, s.in, s.out}));
  dev<float> d_y(std::vector<float>(cpu.size(), NAN));
  HART_RETURN_IF_ERROR(d_y.ok());
  if (bf16) {
    dev<uint16_t> d_x(xb), d_w(wb);
    HART_RETURN_IF_ERROR(linear_bf16_cuda({d_x.get(), d_w.get(), d_y.get(), s.n_rows, s.in, s.out}, ctx, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("linear_bf16", cudaDeviceSynchronize()));
  } else {
    dev<float> d_x(x), d_w(w);
    HART_RETURN_IF_ERROR(linear_cuda({d_x.get(), d_w.get(), d_y.get(), s.n_rows, s.in, s.out}, ctx, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("linear_f32", cudaDeviceSynchronize()));
  }
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  lines.push_back(compare(bf16 ? "linear_bf16" : "linear_f32", s.text(), gpu,
                          std::vector<double>(cpu.begin(), cpu.end()), magnitude(x, w, s), 2e-5, 0.0,
                          "2e-05 * sum|x*w|"));
  return {};
}

status fp8(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, std::vector<op_check_line>& lines) {
  const auto x = normal(rng, s.n_rows * s.in, 1.0f), w = normal(rng, s.out * s.in, 0.05f);
  const int64_t nb_o = (s.out + 127) / 128, nb_i = (s.in + 127) / 128;
  std::vector<uint8_t> wq(w.size()), ws(nb_o * nb_i);
  std::vector<float> wd(w.size());
  HART_RETURN_IF_ERROR(fp8_block_quantize(w.data(), s.out, s.in, 128, wq.data(), ws.data()));
  HART_RETURN_IF_ERROR(fp8_block_dequantize(wq.data(), ws.data(), s.out, s.in, 128, wd.data()));
  std::vector<float> xq = x;  // the CPU rule: QDQ per row per 128 channels
  for (int64_t r = 0; r < s.n_rows; ++r) {
    for (int64_t b = 0; b < s.in; b += 128) {
      const int64_t len = std::min<int64_t>(128, s.in - b);
      HART_RETURN_IF_ERROR(act_quant_fp8_qdq(xq.data() + r * s.in + b, len, len));
    }
  }
  std::vector<float> cpu(s.n_rows * s.out), gpu;
  HART_RETURN_IF_ERROR(linear_cpu({xq.data(), wd.data(), cpu.data(), s.n_rows, s.in, s.out}));
  dev<float> d_x(x), d_y(std::vector<float>(cpu.size(), NAN));
  dev<uint8_t> d_w(wq), d_s(ws);
  HART_RETURN_IF_ERROR(d_y.ok());
  HART_RETURN_IF_ERROR(linear_fp8_cuda({d_x.get(), d_w.get(), d_s.get(), d_y.get(), s.n_rows, s.in, s.out}, ctx, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("linear_fp8", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_y.to_host(gpu));
  lines.push_back(compare("linear_fp8", s.text(), gpu, std::vector<double>(cpu.begin(), cpu.end()),
                          magnitude(xq, wd, s), 2e-5, 0.0, "2e-05 * sum|x'*w'| (QDQ x)"));
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
    for (int64_t b = 0; b < in; b += 128) HART_RETURN_IF_ERROR(act_quant_fp8_qdq(x.data() + r * in + b, 128, 128));
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
  HART_RETURN_IF_ERROR(linear_grouped_cpu({x.data(), cpu.data(), hg.data(), n_groups, tile_group.data(), tile_row0.data(),
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

}  // namespace

status check_linear(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "linear");
  auto ctx = linear_cuda_context::create(64, 4096);
  if (!ctx.ok()) return ctx.get_status();
  const shape decode{4, 4096, 1024}, prefill{64, 1000, 300};  // prefill: in off the 16/128 grid
  for (const shape& s : {decode, prefill}) {
    HART_RETURN_IF_ERROR(dense(rng, **ctx, s, false, lines));
    HART_RETURN_IF_ERROR(dense(rng, **ctx, s, true, lines));
  }
  for (const shape& s : {shape{1, 4096, 1024}, decode, shape{16, 1024, 2048}, prefill}) {
    HART_RETURN_IF_ERROR(fp8(rng, **ctx, s, lines));
  }
  return grouped(rng, lines);
}

}  // namespace hart::op_check_detail
