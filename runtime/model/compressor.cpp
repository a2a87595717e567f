#include "runtime/model/compressor.h"

#include <cmath>
#include <vector>

#include "kernels/compress_pool/compress_pool.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "runtime/core/check.h"
#include "runtime/model/linear_ops.h"

namespace hart {
namespace {

constexpr int64_t k_kv_qdq_block = 64;  // the reference's act_quant block on window/compressed KV

void emit_entry(const compressor_params& p, compressor_state& s) {
  const compressor_weights& w = *p.w;
  const int64_t m = w.rate, c = w.dim, width = w.overlap ? 2 * c : c;
  // Candidates per channel: CSA = previous block's A half (if any) + this block's B half;
  // HCA = the whole block.
  std::vector<const float*> kv_rows, gate_rows;
  if (w.overlap) {
    if (s.has_prev) {
      for (int64_t j = 0; j < m; ++j) {
        kv_rows.push_back(s.prev_kv.data() + j * c);
        gate_rows.push_back(s.prev_gate.data() + j * c);
      }
    }
    for (int64_t j = 0; j < m; ++j) {
      kv_rows.push_back(s.open_kv.data() + j * width + c);
      gate_rows.push_back(s.open_gate.data() + j * width + c);
    }
  } else {
    for (int64_t j = 0; j < m; ++j) {
      kv_rows.push_back(s.open_kv.data() + j * width);
      gate_rows.push_back(s.open_gate.data() + j * width);
    }
  }
  std::vector<float> entry(c);
  HART_CHECK(compress_pool_cpu({kv_rows.data(), gate_rows.data(), entry.data(), int64_t(kv_rows.size()), c}).ok());
  HART_CHECK(rms_norm_cpu({entry.data(), w.norm.data(), entry.data(), 1, c, 0, 0, p.norm_eps}).ok());
  const int64_t first_pos = s.n_entries * m;
  HART_CHECK(rope_cpu({entry.data(), &first_pos, p.inv_freq, 1, 1, c, p.rope_dim}).ok());
  if (p.quant == entry_quant::fp8_nope) fp8_qdq_rows(entry.data(), 1, c - p.rope_dim, k_kv_qdq_block);
  if (p.quant == entry_quant::hadamard_fp4) hadamard_fp4_qdq_rows(entry.data(), 1, c);
  s.entries.insert(s.entries.end(), entry.begin(), entry.end());
  ++s.n_entries;

  if (w.overlap) {  // this block's A half feeds the next entry
    s.prev_kv.resize(m * c);
    s.prev_gate.resize(m * c);
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) {
        s.prev_kv[j * c + ch] = s.open_kv[j * width + ch];
        s.prev_gate[j * c + ch] = s.open_gate[j * width + ch];
      }
    }
    s.has_prev = true;
  }
  s.n_open = 0;
}

}  // namespace

void compressor_push(const compressor_params& p, compressor_state& s, int64_t pos, const float* a,
                     const float* z) {
  const compressor_weights& w = *p.w;
  const int64_t m = w.rate, width = w.overlap ? 2 * w.dim : w.dim;
  HART_CHECK(pos == s.n_entries * m + s.n_open) << "compressor fed position " << pos << " out of order";
  s.open_kv.resize(m * width);
  s.open_gate.resize(m * width);
  const float* ape = w.ape.data() + (pos % m) * width;
  float* kv = s.open_kv.data() + s.n_open * width;
  float* gate = s.open_gate.data() + s.n_open * width;
  for (int64_t i = 0; i < width; ++i) {
    kv[i] = a[i];
    gate[i] = z[i] + ape[i];
  }
  ++s.n_open;
  if (s.n_open == m) emit_entry(p, s);
}

}  // namespace hart
