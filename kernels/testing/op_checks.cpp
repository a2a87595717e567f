#include "kernels/testing/op_checks.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#ifdef HART_CUDA
#include "kernels/testing/op_check_util.h"
#endif

namespace hart {

#ifdef HART_CUDA

namespace op_check_detail {

status cuda_status(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return {};
  return internal_error("%s: %s", what, cudaGetErrorString(e));
}

op_check_line compare(std::string op, std::string shape, const std::vector<float>& got,
                      const std::vector<double>& want, const std::vector<double>& scale, double rtol,
                      double atol, std::string tol_text) {
  op_check_line l{std::move(op), std::move(shape), 0, 0, std::move(tol_text), got.size() == want.size()};
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double g = got[i], w = want[i], s = i < scale.size() ? scale[i] : 0.0;
    if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
      const bool same = (std::isnan(g) && std::isnan(w)) || g == w;
      if (!same) {
        l.pass = false;
        l.max_abs = l.max_rel = INFINITY;
      }
      continue;
    }
    const double d = std::fabs(g - w);
    if (d > atol + rtol * s) l.pass = false;
    l.max_abs = std::fmax(l.max_abs, d);
    if (d > 0) l.max_rel = std::fmax(l.max_rel, s > 0 ? d / s : INFINITY);
  }
  return l;
}

op_check_line compare_bits(std::string op, std::string shape, const std::vector<float>& got,
                           const std::vector<float>& want) {
  op_check_line l{std::move(op), std::move(shape), 0, 0, "exact (bits)", got.size() == want.size()};
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float g = got[i], w = want[i];
    if (std::isnan(g) && std::isnan(w)) continue;
    if (std::memcmp(&g, &w, sizeof g) == 0) continue;
    l.pass = false;
    const double d = std::fabs(double(g) - double(w));  // +0 vs -0: 0, still a failure
    l.max_abs = std::isnan(d) ? INFINITY : std::fmax(l.max_abs, d);
    const double rel = d == 0 ? 0.0 : (w != 0 && std::isfinite(d) ? d / std::fabs(double(w)) : INFINITY);
    l.max_rel = std::fmax(l.max_rel, rel);
  }
  return l;
}

op_check_line compare_codes(std::string op, std::string shape, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& want) {
  op_check_line l{std::move(op), std::move(shape), 0, 0, "exact (codes)", got.size() == want.size()};
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) l.max_abs += got[i] != want[i];
  l.max_rel = want.empty() ? 0.0 : l.max_abs / double(want.size());
  l.pass = l.pass && l.max_abs == 0;
  return l;
}

std::mt19937 op_rng(uint32_t seed, const char* op) {
  uint32_t h = 2166136261u;  // FNV-1a of the op name
  for (const char* c = op; *c; ++c) h = (h ^ uint8_t(*c)) * 16777619u;
  std::seed_seq seq{seed, h};
  return std::mt19937(seq);
}

std::vector<float> normal(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (float& e : v) e = nd(rng);
  return v;
}

}  // namespace op_check_detail

status op_checks_device_status() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();  // clear the sticky error
    return status(status_code::unavailable, std::string("no CUDA device available (") +
                                                (e != cudaSuccess ? cudaGetErrorString(e) : "zero devices") +
                                                ")");
  }
  return {};
}

#else  // !HART_CUDA

status op_checks_device_status() {
  return status(status_code::unavailable, "no CUDA device available (hart was built without CUDA)");
}

#endif

#ifdef HART_CUDA
#define HART_OP_CHECK(fn) op_check_detail::fn
#else
#define HART_OP_CHECK(fn) nullptr
#endif

const std::vector<op_check>& op_checks() {
  static const std::vector<op_check> checks = {
      {"rms_norm", HART_OP_CHECK(check_rms_norm), {"rms_norm_cuda"}},
      {"lightning_topk", HART_OP_CHECK(check_lightning_topk), {"lightning_topk_cuda"}},
      {"linear",
       HART_OP_CHECK(check_linear),
       {"linear_cuda", "linear_bf16w_cuda", "linear_fp8_cuda", "linear_fp8_tc_cuda", "linear_fp8_lt_cuda",
        "linear_fp8_raw_tc_cuda", "linear_grouped_cuda", "linear_grouped_tc_cuda", "fp8_act_quant_cuda"}},
      {"sparse_attention", HART_OP_CHECK(check_sparse_attention), {"sparse_attention_cuda"}},
      {"swiglu", HART_OP_CHECK(check_swiglu), {"swiglu_cuda"}},
      {"rope", HART_OP_CHECK(check_rope), {"rope_cuda"}},
      {"quant",
       HART_OP_CHECK(check_quant),
       {"fp8_act_quant_cuda", "fp4_act_qdq_cuda", "hadamard_transform_cuda"}},
      {"mhc", HART_OP_CHECK(check_mhc), {"hc_pre_cuda", "hc_post_cuda", "hc_head_cuda"}},
      {"moe_route", HART_OP_CHECK(check_moe_route), {"moe_route_cuda"}},
      {"flash_compressor",
       HART_OP_CHECK(check_flash_compressor),
       {"flash_compressor_prefill_cuda", "flash_compressor_decode_cuda"}},
      {"indexer", HART_OP_CHECK(check_indexer), {"indexer_score_paged_cuda"}},
      {"sparse_decode_attention",
       HART_OP_CHECK(check_sparse_decode_attention),
       {"sparse_decode_attention_cuda", "kv_entry_encode_rows_cuda"}},
  };
  return checks;
}

#undef HART_OP_CHECK

std::string op_check_format(const op_check_line& l) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-24s %-40s max_abs %-10.3g max_rel %-10.3g tol %-28s %s", l.op.c_str(),
                l.shape.c_str(), l.max_abs, l.max_rel, l.tol.c_str(), l.pass ? "PASS" : "FAIL");
  return buf;
}

}  // namespace hart
