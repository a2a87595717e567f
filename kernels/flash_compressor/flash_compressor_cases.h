// File: kernels/flash_compressor/flash_compressor_cases.h — random flash
// compressor problems shared by flash_compressor_test.cpp and
// flash_compressor_bench.cu (host code only): shapes, spans with their earlier
// history, page tables with shuffled page ids, poisoned pools, and the checks
// that compare a device result with the CPU reference.
#pragma once

#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/quant/quant.h"
#include "kernels/sparse_decode_attention/kv_entry.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace hart::fc_testing {

/// One compressor's shape.
struct comp_shape {
  int64_t rate, dim, rope_dim;
  bool overlap;
  flash_entry_quant quant;
  flash_entry_format format;
  bool bf16 = false;  // flash_compressor_desc::bf16
};

inline comp_shape flash_csa_main(flash_entry_format f = flash_entry_format::kv_entry) {
  return {4, 512, 64, true, flash_entry_quant::fp8_nope, f};
}
inline comp_shape flash_csa_indexer() {
  return {4, 128, 64, true, flash_entry_quant::hadamard_fp4, flash_entry_format::f32};
}
inline comp_shape flash_hca(flash_entry_format f = flash_entry_format::kv_entry) {
  return {128, 512, 64, false, flash_entry_quant::fp8_nope, f};
}

/// The same shapes with the official inference's bf16 roundings.
inline std::vector<comp_shape> with_bf16(std::vector<comp_shape> shapes) {
  for (comp_shape& s : shapes) s.bf16 = true;
  return shapes;
}

/// Poison of pools before a call: slots the call must not write keep it.
constexpr uint8_t k_poison_byte = 0xa5;

/// Host state of one problem: inputs, page tables and pools of every compressor.
struct problem {
  std::vector<comp_shape> shapes;
  int64_t page_size = 0, pages_stride = 0, n_full = 0, n_swa = 0;
  std::vector<int64_t> start;                  // [n_seq]
  std::vector<int32_t> cu;                     // [n_seq + 1]
  std::vector<int32_t> full_pages, swa_pages;  // [pages_stride, n_seq]
  struct comp_data {
    std::vector<float> kv, gate, ape, norm, inv_freq;  // kv/gate: [width, n_tokens]
    std::vector<float> ring;                           // [ring_page_stride, n_swa]
    std::vector<uint8_t> entries;                      // [entry_page_stride_bytes, n_full]
    int64_t ring_page_stride = 0, entry_page_stride_bytes = 0;
  };
  std::vector<comp_data> comps;
  int64_t n_tokens() const { return cu.back(); }
  int64_t n_seq() const { return int64_t(start.size()); }
};

inline int64_t width_of(const comp_shape& s) {
  return s.overlap ? 2 * s.dim : s.dim;
}
inline int64_t n_cand_of(const comp_shape& s) {
  return s.overlap ? 2 * s.rate : s.rate;
}

/// Params over `pr` whose buffers live at the given bases (host vectors, or
/// device copies laid out the same way). Index c of each array is comp c.
inline flash_compressor_params make_params(
    const problem& pr, const int64_t* start, const int32_t* cu, const int32_t* full_pages,
    const int32_t* swa_pages, const std::vector<const float*>& kv, const std::vector<const float*>& gate,
    const std::vector<const float*>& ape, const std::vector<const float*>& norm,
    const std::vector<const float*>& inv_freq, const std::vector<float*>& ring,
    const std::vector<void*>& entries) {
  flash_compressor_params p;
  p.n_comp = int64_t(pr.shapes.size());
  p.n_seq = pr.n_seq();
  p.n_tokens = pr.n_tokens();
  p.start = start;
  p.cu_tokens = cu;
  p.full_pages = full_pages;
  p.swa_pages = swa_pages;
  p.pages_stride = pr.pages_stride;
  p.page_size = pr.page_size;
  for (size_t c = 0; c < pr.shapes.size(); ++c) {
    const comp_shape& s = pr.shapes[c];
    flash_compressor_desc& d = p.comp[c];
    d.kv = kv[c];
    d.gate = gate[c];
    d.ape = ape[c];
    d.norm = norm[c];
    d.inv_freq = inv_freq[c];
    d.rate = s.rate;
    d.dim = s.dim;
    d.rope_dim = s.rope_dim;
    d.overlap = s.overlap;
    d.quant = s.quant;
    d.format = s.format;
    d.bf16 = s.bf16;
    d.ring = ring[c];
    d.ring_page_stride = pr.comps[c].ring_page_stride;
    d.entries = entries[c];
    d.entry_page_stride_bytes = pr.comps[c].entry_page_stride_bytes;
  }
  return p;
}

inline flash_compressor_params host_params(problem& pr) {
  std::vector<const float*> kv, gate, ape, norm, invf;
  std::vector<float*> ring;
  std::vector<void*> ent;
  for (auto& c : pr.comps) {
    kv.push_back(c.kv.data());
    gate.push_back(c.gate.data());
    ape.push_back(c.ape.data());
    norm.push_back(c.norm.data());
    invf.push_back(c.inv_freq.data());
    ring.push_back(c.ring.data());
    ent.push_back(c.entries.data());
  }
  return make_params(pr, pr.start.data(), pr.cu.data(), pr.full_pages.data(), pr.swa_pages.data(), kv, gate,
                     ape, norm, invf, ring, ent);
}

/// Device copies of a problem's arrays in any buffer type constructed from a
/// host vector with get() (the tests' device_vec, check-ops' dev), and its
/// params over them.
template <template <class> class Buf>
struct device_problem {
  explicit device_problem(const problem& pr)
      : start(pr.start), cu(pr.cu), full(pr.full_pages), swa(pr.swa_pages) {
    for (const auto& c : pr.comps) {
      kv.emplace_back(new Buf<float>(c.kv));
      gate.emplace_back(new Buf<float>(c.gate));
      ape.emplace_back(new Buf<float>(c.ape));
      norm.emplace_back(new Buf<float>(c.norm));
      invf.emplace_back(new Buf<float>(c.inv_freq));
      ring.emplace_back(new Buf<float>(c.ring));
      ent.emplace_back(new Buf<uint8_t>(c.entries));
    }
  }
  flash_compressor_params params(const problem& pr, bool decode) const {
    std::vector<const float*> a, b, c, d, e;
    std::vector<float*> r;
    std::vector<void*> en;
    for (size_t i = 0; i < kv.size(); ++i) {
      a.push_back(kv[i]->get());
      b.push_back(gate[i]->get());
      c.push_back(ape[i]->get());
      d.push_back(norm[i]->get());
      e.push_back(invf[i]->get());
      r.push_back(ring[i]->get());
      en.push_back(ent[i]->get());
    }
    return make_params(pr, start.get(), decode ? nullptr : cu.get(), full.get(), swa.get(), a, b, c, d, e, r,
                       en);
  }
  Buf<int64_t> start;
  Buf<int32_t> cu, full, swa;
  std::vector<std::unique_ptr<Buf<float>>> kv, gate, ape, norm, invf, ring;
  std::vector<std::unique_ptr<Buf<uint8_t>>> ent;
};

/// Fresh projections for spans [start[s], start[s] + len[s]).
inline void fill_projections(problem& pr, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t c = 0; c < pr.shapes.size(); ++c) {
    const int64_t n = pr.n_tokens() * width_of(pr.shapes[c]);
    pr.comps[c].kv.resize(size_t(n));
    pr.comps[c].gate.resize(size_t(n));
    for (float& x : pr.comps[c].kv) x = nd(rng);
    for (float& x : pr.comps[c].gate) x = 2.f * nd(rng);
  }
}

inline void set_spans(problem& pr, const std::vector<int64_t>& start, const std::vector<int64_t>& len) {
  pr.start = start;
  pr.cu.assign(1, 0);
  for (int64_t n : len) pr.cu.push_back(pr.cu.back() + int32_t(n));
}

/// A problem whose sequences s end at start[s] + len[s] at most `max_pos`;
/// weights, page tables (shuffled ids) and poisoned pools. Spans are unset.
inline problem make_problem(const std::vector<comp_shape>& shapes, int64_t page_size, int64_t n_seq,
                            int64_t max_pos, std::mt19937& rng) {
  problem pr;
  pr.shapes = shapes;
  pr.page_size = page_size;
  pr.pages_stride = (max_pos + page_size - 1) / page_size;
  pr.n_full = pr.n_swa = pr.pages_stride * n_seq + 3;
  std::vector<int32_t> ids(size_t(pr.n_full));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  pr.full_pages.assign(ids.begin(), ids.begin() + pr.pages_stride * n_seq);
  std::shuffle(ids.begin(), ids.end(), rng);
  pr.swa_pages.assign(ids.begin(), ids.begin() + pr.pages_stride * n_seq);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const comp_shape& s : shapes) {
    problem::comp_data c;
    const int64_t w = width_of(s);
    c.ape.resize(size_t(w * s.rate));
    for (float& x : c.ape) x = 0.5f * nd(rng);
    c.norm.resize(size_t(s.dim));
    for (float& x : c.norm) x = 1.f + 0.1f * nd(rng);
    for (int64_t i = 0; i < s.rope_dim / 2; ++i)
      c.inv_freq.push_back(std::pow(160000.f, -2.f * float(i) / float(s.rope_dim)));
    c.ring_page_stride = n_cand_of(s) * 2 * w + 4;  // + 4: a gap between pages' rings
    const int64_t row_bytes = s.format == flash_entry_format::kv_entry ? kv_entry_bytes : s.dim * 4;
    c.entry_page_stride_bytes = (page_size / s.rate * row_bytes + 16 + 15) / 16 * 16;
    c.ring.assign(size_t(c.ring_page_stride * pr.n_swa), 0.f);
    std::memset(c.ring.data(), k_poison_byte, c.ring.size() * 4);
    c.entries.assign(size_t(c.entry_page_stride_bytes * pr.n_full), k_poison_byte);
    pr.comps.push_back(std::move(c));
  }
  return pr;
}

/// Same shapes with quant none and f32 rows: the pre-quantization values.
inline std::vector<comp_shape> unquantized(std::vector<comp_shape> shapes) {
  for (comp_shape& s : shapes) {
    s.quant = flash_entry_quant::none;
    s.format = flash_entry_format::f32;
  }
  return shapes;
}

/// A copy of `pr` with quant none and f32 rows (the pre-quantization values):
/// same inputs, pages and rings, freshly poisoned entry pools.
inline problem as_unquantized(const problem& pr) {
  problem u = pr;
  u.shapes = unquantized(pr.shapes);
  for (size_t c = 0; c < u.shapes.size(); ++c) {
    const comp_shape& s = u.shapes[c];
    u.comps[c].entry_page_stride_bytes = (pr.page_size / s.rate * s.dim * 4 + 16 + 15) / 16 * 16;
    u.comps[c].entries.assign(size_t(u.comps[c].entry_page_stride_bytes * u.n_full), k_poison_byte);
  }
  return u;
}

/// Byte offset of the entry of block `blk` of sequence s in comp c's pool.
inline int64_t entry_offset(const problem& pr, int64_t c, int64_t s, int64_t blk) {
  const comp_shape& sh = pr.shapes[size_t(c)];
  const int64_t first = blk * sh.rate;
  const int64_t row_bytes = sh.format == flash_entry_format::kv_entry ? kv_entry_bytes : sh.dim * 4;
  return pr.full_pages[size_t(s * pr.pages_stride + first / pr.page_size)] *
             pr.comps[size_t(c)].entry_page_stride_bytes +
         (first % pr.page_size) / sh.rate * row_bytes;
}

/// Blocks (s, blk) that close inside the spans of `pr`.
inline std::vector<std::pair<int64_t, int64_t>> closing_blocks(const problem& pr, int64_t rate) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t s = 0; s < pr.n_seq(); ++s) {
    const int64_t p0 = pr.start[size_t(s)], n = pr.cu[size_t(s) + 1] - pr.cu[size_t(s)];
    for (int64_t b = p0 / rate; b < (p0 + n) / rate; ++b) out.push_back({s, b});
  }
  return out;
}

/// The quantized form the op stores, computed on the host from pre-quantization
/// values `v` (c floats): bytes as written into the pool.
inline std::vector<uint8_t> quantize_entry(const comp_shape& sh, std::vector<float> v) {
  if (sh.format == flash_entry_format::kv_entry) {
    std::vector<uint8_t> e(static_cast<size_t>(kv_entry_bytes));
    (void)kv_entry_encode(v.data(), e.data());
    return e;
  }
  if (sh.quant == flash_entry_quant::fp8_nope) {
    const int64_t nope = sh.dim - sh.rope_dim;
    for (int64_t b = 0; b < nope; b += 64) {
      const int64_t len = std::min<int64_t>(64, nope - b);
      (void)act_quant_fp8_qdq(v.data() + b, len, len);
    }
  } else if (sh.quant == flash_entry_quant::hadamard_fp4) {
    (void)hadamard_transform(v.data(), sh.dim, 1.0f / std::sqrt(float(sh.dim)));
    if (sh.bf16) {
      for (float& x : v) x = round_to_bf16(x);
    }
    (void)fp4_act_qdq(v.data(), sh.dim, std::min<int64_t>(32, sh.dim));
  }
  std::vector<uint8_t> e(size_t(sh.dim * 4));
  std::memcpy(e.data(), v.data(), e.size());
  return e;
}

/// Result of comparing a device run against the CPU reference.
struct compare_result {
  bool ok = true;
  std::string what;           // first failure
  double max_pre_err = 0;     // max |gpu − cpu| / max|row| over pre-quantization values
  int64_t n_values = 0;       // quantized values (kv_entry: bytes) compared with the CPU reference
  int64_t n_flips = 0;        // of which differ from the CPU reference's stored value
  int64_t n_bf16_rows = 0;    // bf16 entries, whose pre-quantization rows are compared bitwise
  int64_t n_bf16_differ = 0;  // of which differ from the CPU's in some bit
};

/// Pre-quantization tolerance, relative to the row's max |value|: online vs
/// three-pass softmax and expf/sincosf last bits, growing with the candidates.
/// bf16: the same arithmetic in the same order, so rows are compared bitwise;
/// the exceptions (counted in n_bf16_differ) come from exp and sin/cos alone,
/// correctly rounded on the GPU while glibc's expf / sincosf miss by an ulp on
/// ~7e-4 / ~1.3% of arguments: where such an fp32 ulp lands on a bf16 rounding
/// boundary (about 2^-16 of the time), one value moves by a bf16 ulp and, through
/// the norm's scale, a few others of its row (~2e-4 of Flash CSA rows, measured).
/// 2^-6 of the row's max |value| covers two bf16 ulps of its largest values.
inline double pre_tolerance(const comp_shape& s) {
  return s.bf16 ? 0x1p-6 : 1e-5 + 1e-6 * double(n_cand_of(s));
}

/// Compares, for comp c: gpu_pre / cpu_pre are pools of the unquantized run,
/// gpu / cpu of the quantized run, all after the same call on the same inputs.
/// Checks: every byte outside the call's entries equal to the CPU pool (poison
/// kept); pre-quantization values within pre_tolerance; every stored GPU entry
/// bit-equal to the host quantization of the GPU's own pre-quantization values.
inline void compare_entries(const problem& pr, int64_t c, const std::vector<uint8_t>& gpu_pre,
                            const std::vector<uint8_t>& cpu_pre, const std::vector<uint8_t>& gpu,
                            const std::vector<uint8_t>& cpu, compare_result& r) {
  const comp_shape& sh = pr.shapes[size_t(c)];
  const int64_t D = sh.dim;
  const int64_t row_bytes = sh.format == flash_entry_format::kv_entry ? kv_entry_bytes : D * 4;
  std::vector<uint8_t> written(gpu.size(), 0), written_pre(gpu_pre.size(), 0);
  auto fail = [&](const std::string& w) {
    if (r.ok) r.what = w;
    r.ok = false;
  };
  for (auto [s, blk] : closing_blocks(pr, sh.rate)) {
    const int64_t off = entry_offset(pr, c, s, blk);
    // The unquantized pools hold f32 rows: same slot, D * 4 bytes per row.
    const int64_t first = blk * sh.rate;
    const int64_t pre_stride = (pr.page_size / sh.rate * D * 4 + 16 + 15) / 16 * 16;
    const int64_t off_pre = pr.full_pages[size_t(s * pr.pages_stride + first / pr.page_size)] * pre_stride +
                            (first % pr.page_size) / sh.rate * D * 4;
    std::vector<float> g(static_cast<size_t>(D)), w(static_cast<size_t>(D));
    std::memcpy(g.data(), gpu_pre.data() + off_pre, size_t(D) * 4);
    std::memcpy(w.data(), cpu_pre.data() + off_pre, size_t(D) * 4);
    std::fill(written_pre.begin() + off_pre, written_pre.begin() + off_pre + D * 4, 1);
    double mag = 0, err = 0;
    for (int64_t i = 0; i < D; ++i) mag = std::max(mag, double(std::fabs(w[size_t(i)])));
    if (sh.bf16) {
      ++r.n_bf16_rows;
      if (std::memcmp(g.data(), w.data(), size_t(D) * 4) != 0) {
        ++r.n_bf16_differ;
      } else if (std::memcmp(gpu.data() + off, cpu.data() + off, size_t(row_bytes)) != 0) {
        fail("bf16 entry seq " + std::to_string(s) + " block " + std::to_string(blk) +
             ": equal pre-quantization rows, different stored entries");
      }
    }
    for (int64_t i = 0; i < D; ++i) {
      const double e = std::fabs(double(g[size_t(i)]) - double(w[size_t(i)]));
      if (!(e <= pre_tolerance(sh) * mag)) {
        fail("pre-quant seq " + std::to_string(s) + " block " + std::to_string(blk) + " dim " +
             std::to_string(i) + ": gpu " + std::to_string(g[size_t(i)]) + " cpu " +
             std::to_string(w[size_t(i)]));
      }
      err = std::max(err, e / std::max(mag, 1e-30));
    }
    r.max_pre_err = std::max(r.max_pre_err, err);
    const std::vector<uint8_t> want = quantize_entry(sh, g);
    if (std::memcmp(want.data(), gpu.data() + off, size_t(row_bytes)) != 0) {
      fail("stored entry seq " + std::to_string(s) + " block " + std::to_string(blk) +
           " != host quantization of the GPU's pre-quantization values");
    }
    std::fill(written.begin() + off, written.begin() + off + row_bytes, 1);
    // Flips against the CPU reference over quantized values only: kv_entry bytes
    // (codes, bf16 RoPE, scales), fp8 rows' NoPE floats, FP4 rows' floats.
    const int64_t unit = sh.format == flash_entry_format::kv_entry ? 1 : 4;
    const int64_t n_quantized = sh.format == flash_entry_format::kv_entry     ? row_bytes
                                : sh.quant == flash_entry_quant::fp8_nope     ? (D - sh.rope_dim) * 4
                                : sh.quant == flash_entry_quant::hadamard_fp4 ? row_bytes
                                                                              : 0;
    for (int64_t b = 0; b < n_quantized; b += unit) {
      ++r.n_values;
      if (std::memcmp(gpu.data() + off + b, cpu.data() + off + b, size_t(unit)) != 0) ++r.n_flips;
    }
  }
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!written[i] && gpu[i] != cpu[i]) {
      fail("entry pool byte " + std::to_string(i) + " outside the call's entries changed");
      break;
    }
  }
  for (size_t i = 0; i < gpu_pre.size(); ++i) {
    if (!written_pre[i] && gpu_pre[i] != cpu_pre[i]) {
      fail("unquantized entry pool byte " + std::to_string(i) + " outside the call's entries changed");
      break;
    }
  }
}

/// Rings hold exact copies (kv, gate + ape): bitwise equal, poison included.
inline void compare_rings(const std::vector<float>& gpu, const std::vector<float>& cpu, compare_result& r) {
  if (gpu.size() != cpu.size() || std::memcmp(gpu.data(), cpu.data(), gpu.size() * 4) != 0) {
    if (r.ok) r.what = "ring pool differs from the CPU reference";
    r.ok = false;
  }
}

}  // namespace hart::fc_testing
