// mhc (hyper-connections): CUDA vs CPU with kernels/mhc/mhc_test.cpp's rules.
// hc_pre and hc_head differ only in the fp64 summation order of the mix dots
// and in expf's last bits (~1e-7 relative into the gates; Sinkhorn, a
// contraction, does not amplify them): post within 1e-6·|post|, comb (entries in
// [0, 1]) within 2e-6 absolute, collapsed and the head output within
// 1e-6·Σ_i|X_i|. hc_post is the same fp32 operations in the same order: bit-identical.
#include "kernels/mhc/mhc.h"
#include "kernels/testing/op_check_util.h"

#include <cmath>

namespace hart::op_check_detail {
namespace {

struct shape {
  int64_t n_tokens, n_hc, dim, iters;
  std::string text() const {
    return "tokens=" + std::to_string(n_tokens) + " n_hc=" + std::to_string(n_hc) +
           " dim=" + std::to_string(dim);
  }
};

// The gate inputs: streams x, projection fn, base and the three scales, drawn as
// in mhc_test.cpp (fn ~ N(0, 1/(n_hc·dim)), so every mix value is O(1)).
struct gate_inputs {
  std::vector<float> x, fn, base, scale;
};

gate_inputs make_inputs(std::mt19937& rng, const shape& s, int64_t n_out) {
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  gate_inputs in;
  in.x = normal(rng, s.n_tokens * s.n_hc * s.dim, ud(rng));
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
  HART_RETURN_IF_ERROR(hc_pre_cpu(p));
  dev<float> d_x(in.x), d_fn(in.fn), d_base(in.base), d_scale(in.scale);
  dev<float> d_col(std::vector<float>(col.size(), NAN)), d_post(std::vector<float>(post.size(), NAN)),
      d_comb(std::vector<float>(comb.size(), NAN));
  HART_RETURN_IF_ERROR(d_comb.ok());
  p.x = d_x.get();
  p.fn = d_fn.get();
  p.base = d_base.get();
  p.scale = d_scale.get();
  p.collapsed = d_col.get();
  p.post = d_post.get();
  p.comb = d_comb.get();
  HART_RETURN_IF_ERROR(hc_pre_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("hc_pre", cudaDeviceSynchronize()));
  std::vector<float> g_col, g_post, g_comb;
  HART_RETURN_IF_ERROR(d_col.to_host(g_col));
  HART_RETURN_IF_ERROR(d_post.to_host(g_post));
  HART_RETURN_IF_ERROR(d_comb.to_host(g_comb));
  const std::string text = s.text() + " iters=" + std::to_string(s.iters);
  std::vector<double> post_mag(post.size());
  for (size_t i = 0; i < post.size(); ++i) post_mag[i] = std::fabs(post[i]);
  lines.push_back(
      compare("hc_pre_post", text, g_post, as_double(post), post_mag, 1e-6, 0.0, "1e-06 * |post|"));
  lines.push_back(compare("hc_pre_comb", text, g_comb, as_double(comb), std::vector<double>(comb.size(), 1.0),
                          0.0, 2e-6, "2e-06 abs (comb in [0,1])"));
  lines.push_back(compare("hc_pre_collapsed", text, g_col, as_double(col), stream_magnitude(in.x, s), 1e-6,
                          0.0, "1e-06 * sum_i|X_i|"));
  return {};
}

status post(std::mt19937& rng, const shape& s, std::vector<op_check_line>& lines) {
  const int64_t n = s.n_hc;
  const auto x = normal(rng, s.n_tokens * n * s.dim, 1.0f), y = normal(rng, s.n_tokens * s.dim, 1.0f);
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
  lines.push_back(compare_bits("hc_post", s.text(), gpu, cpu));
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
  lines.push_back(compare("hc_head", s.text(), gpu, as_double(cpu), stream_magnitude(in.x, s), 1e-6, 0.0,
                          "1e-06 * sum_i|X_i|"));
  return {};
}

}  // namespace

status check_mhc(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "mhc");
  // V4: hidden 4096, 4 streams, 20 Sinkhorn iterations, 64 tokens; odd: 3 streams of 111, 7 iterations
  for (const shape& s : {shape{64, 4, 4096, 20}, shape{19, 3, 111, 7}}) {
    HART_RETURN_IF_ERROR(pre(rng, s, lines));
    HART_RETURN_IF_ERROR(post(rng, s, lines));
    HART_RETURN_IF_ERROR(head(rng, s, lines));
  }
  return {};
}

}  // namespace hart::op_check_detail
