// mhc (hyper-connections): CUDA vs CPU with kernels/mhc/mhc_test.cpp's rules.
// hc_pre and hc_head differ only in the fp64 summation order of the mix dots
// and in expf's last bits (~1e-7 relative into the gates; Sinkhorn, a
// contraction, does not amplify them): post within 1e-6·|post|, comb (entries in
// [0, 1]) within 2e-6 absolute, collapsed and the head output within
// 1e-6·Σ_i|X_i|. hc_post is the same fp32 operations in the same order: bit-identical.
// "bf16" lines (the GPU engine's fp8 mode: hc_*_params::bf16 on bf16 streams, hc_pre
// with its split workspace at <= 8 tokens as the engine runs it) follow
// kernels/mhc/mhc_cuda_test.cpp's official / bf16 rules: the CPU's arithmetic but
// the fp64 dot order, which flips a mix value's rounding on rare tokens, so at most
// 1 + T/1000 tokens may differ: post and comb within the bounds above, the
// collapse (pre's, head's) by one bf16 ulp on at most 4 values each; hc_post bitwise.
#include "kernels/mhc/mhc.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hart::op_check_detail {
namespace {

struct shape {
  int64_t n_tokens, n_hc, dim, iters;
  bool bf16 = false;
  bool split = false;  // hc_pre with hc_pre_workspace_bytes of scratch (<= 8 tokens)
  std::string text() const {
    return "tokens=" + std::to_string(n_tokens) + " n_hc=" + std::to_string(n_hc) +
           " dim=" + std::to_string(dim);
  }
  std::string suffix() const { return bf16 ? " bf16" : ""; }
};

// The gate inputs: streams x, projection fn, base and the three scales, drawn as
// in mhc_test.cpp (fn ~ N(0, 1/(n_hc·dim)), so every mix value is O(1)); bf16:
// the streams rounded, as the engine holds them.
struct gate_inputs {
  std::vector<float> x, fn, base, scale;
};

gate_inputs make_inputs(std::mt19937& rng, const shape& s, int64_t n_out) {
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  gate_inputs in;
  in.x = normal(rng, s.n_tokens * s.n_hc * s.dim, ud(rng));
  if (s.bf16) {
    for (float& v : in.x) v = round_to_bf16(v);
  }
  in.fn = normal(rng, n_out * s.n_hc * s.dim, 1.0f / std::sqrt(float(s.n_hc * s.dim)));
  in.base = normal(rng, n_out, 1.0f);
  in.scale = {ud(rng), ud(rng), ud(rng) / 2};
  return in;
}

// Σ_i |X_i[d]| per (token, channel): the magnitude collapsed and head are relative to.
std::vector<double> stream_magnitude(const std::vector<float>& x, const shape& s) {
  std::vector<double> m(s.n_tokens * s.dim, 0.0);
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    for (int64_t i = 0; i < s.n_hc; ++i) {
      for (int64_t d = 0; d < s.dim; ++d) m[t * s.dim + d] += std::fabs(x[(t * s.n_hc + i) * s.dim + d]);
    }
  }
  return m;
}

std::vector<double> as_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// bf16: the tokens whose mix may differ (mhc_cuda_test.cpp's mix_flip_tokens).
int64_t mix_flip_tokens(int64_t n_tokens) {
  return 1 + n_tokens / 1000;
}

// Tokens of `per_token` values each with some value not bit-identical.
int64_t tokens_off(const std::vector<float>& got, const std::vector<float>& want, int64_t per_token) {
  int64_t n = 0;
  for (size_t t = 0; (t + 1) * size_t(per_token) <= std::min(got.size(), want.size()); ++t) {
    n += std::memcmp(&got[t * per_token], &want[t * per_token], per_token * sizeof(float)) != 0;
  }
  return n;
}

// A post or comb line under bf16: its fp32 bound, and bit-identical but on the flip tokens.
op_check_line mix_line(op_check_line l, const shape& s, const std::vector<float>& got,
                       const std::vector<float>& want, int64_t per_token) {
  if (s.bf16) l.pass = l.pass && tokens_off(got, want, per_token) <= mix_flip_tokens(s.n_tokens);
  return l;
}

// The collapse (hc_pre's, hc_head's): fp32 within 1e-6·Σ_i|X_i|; bf16 one bf16 ulp (the
// gap from the CPU's value away from zero; max_rel counts them) on at most
// 4·mix_flip_tokens values in at most mix_flip_tokens tokens.
op_check_line collapse_line(const char* op, const std::string& text, const shape& s,
                            const std::vector<float>& got, const std::vector<float>& want,
                            const std::vector<float>& x) {
  if (!s.bf16) {
    return compare(op, text, got, as_double(want), stream_magnitude(x, s), 1e-6, 0.0, "1e-06 * sum_i|X_i|");
  }
  std::vector<double> ulp(want.size());
  int64_t n_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ulp[i] = std::fabs(double(f32_from_bf16(uint16_t(bf16_from_f32(want[i]) + 1))) - double(want[i]));
    n_diff += i < got.size() && std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  }
  op_check_line l = compare(op, text, got, as_double(want), ulp, 1.0, 0.0, "1 bf16 ulp on 4(1+T/1000)");
  const int64_t flips = mix_flip_tokens(s.n_tokens);
  l.pass = l.pass && n_diff <= 4 * flips && tokens_off(got, want, s.dim) <= flips;
  return l;
}

status pre(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const int64_t n = s.n_hc;
  const gate_inputs in = make_inputs(rng, s, (2 + n) * n);
  std::vector<float> col(s.n_tokens * s.dim), post(s.n_tokens * n), comb(s.n_tokens * n * n);
  hc_pre_params p;
  p.x = in.x.data();
  p.fn = in.fn.data();
  p.base = in.base.data();
  p.scale = in.scale.data();
  p.collapsed = col.data();
  p.post = post.data();
  p.comb = comb.data();
  p.n_tokens = s.n_tokens;
  p.n_hc = n;
  p.dim = s.dim;
  p.sinkhorn_iters = s.iters;
  p.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(hc_pre_cpu(p));
  dev<float> d_x(in.x), d_fn(in.fn), d_base(in.base), d_scale(in.scale);
  dev<float> d_col(std::vector<float>(col.size(), NAN)), d_post(std::vector<float>(post.size(), NAN)),
      d_comb(std::vector<float>(comb.size(), NAN));
  HART_RETURN_IF_ERROR(d_comb.ok());
  const size_t ws_bytes = s.split ? hc_pre_workspace_bytes(s.n_tokens, n, s.dim) : 0;
  dev<double> d_ws(std::vector<double>(std::max<size_t>(ws_bytes / sizeof(double), 1), NAN));
  HART_RETURN_IF_ERROR(d_ws.ok());
  p.x = d_x.get();
  p.fn = d_fn.get();
  p.base = d_base.get();
  p.scale = d_scale.get();
  p.collapsed = d_col.get();
  p.post = d_post.get();
  p.comb = d_comb.get();
  p.workspace = ws_bytes ? d_ws.get() : nullptr;
  HART_RETURN_IF_ERROR(hc_pre_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("hc_pre", cudaDeviceSynchronize()));
  std::vector<float> g_col, g_post, g_comb;
  HART_RETURN_IF_ERROR(d_col.to_host(g_col));
  HART_RETURN_IF_ERROR(d_post.to_host(g_post));
  HART_RETURN_IF_ERROR(d_comb.to_host(g_comb));
  const std::string text =
      s.text() + " iters=" + std::to_string(s.iters) + (ws_bytes ? " split" : "") + s.suffix();
  const char* on_flips = s.bf16 ? ", 1+T/1000 tok" : "";
  std::vector<double> post_mag(post.size());
  for (size_t i = 0; i < post.size(); ++i) post_mag[i] = std::fabs(post[i]);
  lines.push_back(mix_line(compare("hc_pre_post", text, g_post, as_double(post), post_mag, 1e-6, 0.0,
                                   std::string("1e-06 * |post|") + on_flips),
                           s, g_post, post, n));
  lines.push_back(
      mix_line(compare("hc_pre_comb", text, g_comb, as_double(comb), std::vector<double>(comb.size(), 1.0),
                       0.0, 2e-6, std::string("2e-06 abs (comb in [0,1])") + on_flips),
               s, g_comb, comb, n * n));
  lines.push_back(collapse_line("hc_pre_collapsed", text, s, g_col, col, in.x));
  return {};
}

status post(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const int64_t n = s.n_hc;
  auto x = normal(rng, s.n_tokens * n * s.dim, 1.0f), y = normal(rng, s.n_tokens * s.dim, 1.0f);
  if (s.bf16) {
    for (float& v : x) v = round_to_bf16(v);
    for (float& v : y) v = round_to_bf16(v);
  }
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> post(s.n_tokens * n), comb(s.n_tokens * n * n);
  for (float& v : post) v = 2 * ud(rng);
  for (float& v : comb) v = ud(rng);
  std::vector<float> cpu(x.size()), gpu;
  hc_post_params p;
  p.x = x.data();
  p.y = y.data();
  p.post = post.data();
  p.comb = comb.data();
  p.out = cpu.data();
  p.n_tokens = s.n_tokens;
  p.n_hc = n;
  p.dim = s.dim;
  p.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(hc_post_cpu(p));
  dev<float> d_x(x), d_y(y), d_post(post), d_comb(comb), d_out(std::vector<float>(x.size(), NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  p.x = d_x.get();
  p.y = d_y.get();
  p.post = d_post.get();
  p.comb = d_comb.get();
  p.out = d_out.get();
  HART_RETURN_IF_ERROR(hc_post_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("hc_post", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_out.to_host(gpu));
  lines.push_back(compare_bits("hc_post", s.text() + s.suffix(), gpu, cpu));
  return {};
}

status head(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const gate_inputs in = make_inputs(rng, s, s.n_hc);
  std::vector<float> cpu(s.n_tokens * s.dim), gpu;
  hc_head_params p;
  p.x = in.x.data();
  p.fn = in.fn.data();
  p.base = in.base.data();
  p.scale = in.scale.data();
  p.out = cpu.data();
  p.n_tokens = s.n_tokens;
  p.n_hc = s.n_hc;
  p.dim = s.dim;
  p.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(hc_head_cpu(p));
  dev<float> d_x(in.x), d_fn(in.fn), d_base(in.base), d_scale(in.scale),
      d_out(std::vector<float>(cpu.size(), NAN));
  HART_RETURN_IF_ERROR(d_out.ok());
  p.x = d_x.get();
  p.fn = d_fn.get();
  p.base = d_base.get();
  p.scale = d_scale.get();
  p.out = d_out.get();
  HART_RETURN_IF_ERROR(hc_head_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("hc_head", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_out.to_host(gpu));
  lines.push_back(collapse_line("hc_head", s.text() + s.suffix(), s, gpu, cpu, in.x));
  return {};
}

}  // namespace

status check_mhc(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "mhc");
  // V4: hidden 4096, 4 streams, 20 Sinkhorn iterations, 64 tokens; odd: 3 streams of 111,
  // 7 iterations. bf16: prefill (64 tokens) and decode (2 tokens of Flash's 4096, 1 of
  // Pro's 7168; hc_pre split as the engine runs it).
  const shape shapes[] = {{64, 4, 4096, 20},
                          {19, 3, 111, 7},
                          {64, 4, 4096, 20, true},
                          {2, 4, 4096, 20, true, true},
                          {1, 4, 7168, 20, true, true}};
  for (const shape& s : shapes) {
    HART_RETURN_IF_ERROR(pre(rng, s, lines));
    HART_RETURN_IF_ERROR(post(rng, s, lines));
    HART_RETURN_IF_ERROR(head(rng, s, lines));
  }
  return {};
}

}  // namespace hart::op_check_detail
