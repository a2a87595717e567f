#include "training/v4_model.h"

#include "runtime/core/check.h"
#include "runtime/model/weights.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

namespace hart::training {
namespace {

using torch::indexing::Slice;

// mHC runs in fp32 in the reference even when activations are bf16.
torch::Dtype wide_dtype(torch::Dtype d) {
  return d == torch::kBFloat16 ? torch::kFloat32 : d;
}

// Causal visibility of compressed entries: query t sees entry i iff (i+1)·m <= t+1. [S, n_entries]
torch::Tensor entry_visible(int64_t S, int64_t n_entries, int64_t m, const torch::Device& dev) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(dev);
  torch::Tensor t = torch::arange(S, opts).unsqueeze(1);
  torch::Tensor i = torch::arange(n_entries, opts).unsqueeze(0);
  return (i + 1) * m <= t + 1;
}

// The indexer's picks [B, S, k]: top-k of the masked scores [B, S, n_entries]
// over all entries, then the picks of future entries set to -1, exactly as
// torch.topk does in the reference's full pass.
torch::Tensor indexer_topk(const torch::Tensor& score, int64_t k, int64_t m) {
  const int64_t S = score.size(1);
  torch::Tensor pick = std::get<1>(torch::topk(score, std::min(k, score.size(2)), -1));
  torch::Tensor t = torch::arange(S, torch::TensorOptions().dtype(torch::kLong)).view({1, S, 1});
  return pick.masked_fill((pick + 1) * m > t + 1, -1);
}

// Entries each position attends to [B, S, n_entries] given picks [B, S, k]
// (-1 = none); picks of future entries are dropped, as the pick rule does.
torch::Tensor picks_mask(const torch::Tensor& pick, int64_t n_entries, int64_t m) {
  const int64_t B = pick.size(0), S = pick.size(1);
  torch::Tensor t = torch::arange(S, torch::TensorOptions().dtype(torch::kLong)).view({1, S, 1});
  torch::Tensor valid = (pick >= 0) & ((pick + 1) * m <= t + 1);
  return torch::zeros({B, S, n_entries}, torch::kFloat32)
             .scatter_add(2, pick.clamp_min(0), valid.to(torch::kFloat32)) > 0;
}

struct hc_split {
  torch::Tensor collapsed;  // [B, S, D]
  torch::Tensor post;       // [B, S, n]
  torch::Tensor comb;       // [B, S, n, n]: input stream j -> output stream k
};

// hc_pre (v4-model.md §5.2): stream weights, post gains and the Sinkhorn-normalised mixing matrix.
hc_split hc_pre(const torch::Tensor& X, const torch::Tensor& fn, const torch::Tensor& base,
                const torch::Tensor& scale, const model_config& cfg) {
  const int64_t n = cfg.hc_mult;
  const double eps = cfg.hc_eps;
  torch::Tensor xf = X.flatten(2);
  torch::Tensor r = torch::rsqrt(xf.pow(2).mean(-1, true) + cfg.norm_eps);
  torch::Tensor mix = torch::matmul(xf, fn.t()) * r;
  torch::Tensor pre = torch::sigmoid(mix.narrow(-1, 0, n) * scale[0] + base.narrow(0, 0, n)) + eps;
  hc_split s;
  s.post = 2.0 * torch::sigmoid(mix.narrow(-1, n, n) * scale[1] + base.narrow(0, n, n));
  torch::Tensor c = mix.narrow(-1, 2 * n, n * n) * scale[2] + base.narrow(0, 2 * n, n * n);
  c = torch::softmax(c.unflatten(-1, {n, n}), -1) + eps;
  c = c / (c.sum(-2, true) + eps);
  for (int64_t it = 1; it < cfg.hc_sinkhorn_iters; ++it) {
    c = c / (c.sum(-1, true) + eps);
    c = c / (c.sum(-2, true) + eps);
  }
  s.comb = c;
  s.collapsed = (pre.unsqueeze(-1) * X).sum(2);
  return s;
}

// hc_post: X'[k] = post[k]·y + Σ_j comb[j][k]·X[j].
torch::Tensor hc_post(const torch::Tensor& X, const torch::Tensor& y, const hc_split& s) {
  return s.post.unsqueeze(-1) * y.unsqueeze(2) + torch::einsum("bsjk,bsjd->bskd", {s.comb, X});
}

}  // namespace

// -- parameters ------------------------------------------------------------

torch::nn::Module& v4_model::module_at(const std::string& path, std::string* leaf) {
  torch::nn::Module* m = this;
  size_t start = 0, dot;
  while ((dot = path.find('.', start)) != std::string::npos) {
    const std::string part = path.substr(start, dot - start);
    auto children = m->named_children();
    auto* child = children.find(part);
    m = child ? child->get() : m->register_module(part, std::make_shared<torch::nn::Module>()).get();
    start = dot + 1;
  }
  *leaf = path.substr(start);
  return *m;
}

torch::Tensor v4_model::add_param(const std::string& name, std::vector<int64_t> shape, bool trainable) {
  std::string leaf;
  torch::nn::Module& m = module_at(name, &leaf);
  return m.register_parameter(leaf, torch::zeros(shape), trainable);
}

torch::Tensor v4_model::add_buffer(const std::string& name, torch::Tensor t) {
  std::string leaf;
  return module_at(name, &leaf).register_buffer(leaf, std::move(t));
}

v4_model::compressor_t v4_model::add_compressor(const std::string& p, int64_t rate, int64_t dim, bool overlap,
                                                bool trainable) {
  const int64_t D = cfg_.hidden_size, width = (overlap ? 2 : 1) * dim;
  compressor_t c;
  c.rate = rate;
  c.dim = dim;
  c.overlap = overlap;
  c.wkv = add_param(p + ".wkv.weight", {width, D}, trainable);
  c.wgate = add_param(p + ".wgate.weight", {width, D}, trainable);
  c.ape = add_param(p + ".ape", {rate, width}, trainable);
  c.norm = add_param(p + ".norm.weight", {dim}, trainable);
  return c;
}

v4_model::v4_model(const model_config& cfg) : cfg_(cfg) {
  HART_CHECK(cfg_.validate().ok()) << "v4_model: invalid config: " << cfg_.validate().to_string();
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult, n_mix = (2 + n) * n;
  const int64_t H = cfg.n_heads, hd = cfg.head_dim, E = cfg.n_routed_experts, I = cfg.moe_inter_dim;
  embed_ = add_param("embed.weight", {V, D});
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    const std::string p = "layers." + std::to_string(il);
    layer_t L;
    L.kind = cfg.layer_kinds[il];
    L.hash_moe = cfg.layer_hash_moe[il];
    L.hc_attn_fn = add_param(p + ".hc_attn_fn", {n_mix, n * D});
    L.hc_attn_base = add_param(p + ".hc_attn_base", {n_mix});
    L.hc_attn_scale = add_param(p + ".hc_attn_scale", {3});
    L.hc_ffn_fn = add_param(p + ".hc_ffn_fn", {n_mix, n * D});
    L.hc_ffn_base = add_param(p + ".hc_ffn_base", {n_mix});
    L.hc_ffn_scale = add_param(p + ".hc_ffn_scale", {3});
    L.attn_norm = add_param(p + ".attn_norm.weight", {D});
    L.ffn_norm = add_param(p + ".ffn_norm.weight", {D});
    const std::string a = p + ".attn";
    L.wq_a = add_param(a + ".wq_a.weight", {cfg.q_lora_rank, D});
    L.q_norm = add_param(a + ".q_norm.weight", {cfg.q_lora_rank});
    L.wq_b = add_param(a + ".wq_b.weight", {H * hd, cfg.q_lora_rank});
    L.wkv = add_param(a + ".wkv.weight", {hd, D});
    L.kv_norm = add_param(a + ".kv_norm.weight", {hd});
    L.wo_a = add_param(a + ".wo_a.weight", {cfg.o_groups * cfg.o_lora_rank, H * hd / cfg.o_groups});
    L.wo_b = add_param(a + ".wo_b.weight", {D, cfg.o_groups * cfg.o_lora_rank});
    L.attn_sink = add_param(a + ".attn_sink", {H});
    if (L.kind != attention_kind::sliding) {
      const bool csa = L.kind == attention_kind::csa;
      L.compressor = add_compressor(a + ".compressor", cfg.compress_rate(L.kind), hd, csa, true);
      if (csa) {
        // NOTE(hart): frozen: the indexer only feeds the non-differentiable top-k.
        L.index_wq_b = add_param(a + ".indexer.wq_b.weight",
                                 {cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank}, false);
        L.index_weights_proj = add_param(a + ".indexer.weights_proj.weight", {cfg.index_n_heads, D}, false);
        L.index_compressor =
            add_compressor(a + ".indexer.compressor", cfg.csa_rate, cfg.index_head_dim, true, false);
      }
    }
    const std::string f = p + ".ffn";
    L.gate = add_param(f + ".gate.weight", {E, D});
    if (L.hash_moe) {
      L.tid2eid = add_buffer(f + ".gate.tid2eid", torch::zeros({V, cfg.n_activated_experts}, torch::kLong));
    } else {
      // NOTE(hart): the selection bias is balanced by a separate rule, never by gradient.
      L.gate_bias = add_param(f + ".gate.bias", {E}, false);
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = f + ".experts." + std::to_string(e);
      L.w1.push_back(add_param(x + ".w1.weight", {I, D}));
      L.w2.push_back(add_param(x + ".w2.weight", {D, I}));
      L.w3.push_back(add_param(x + ".w3.weight", {I, D}));
    }
    if (cfg.n_shared_experts > 0) {
      const int64_t Is = I * cfg.n_shared_experts;
      L.shared_w1 = add_param(f + ".shared_experts.w1.weight", {Is, D});
      L.shared_w2 = add_param(f + ".shared_experts.w2.weight", {D, Is});
      L.shared_w3 = add_param(f + ".shared_experts.w3.weight", {Is, D});
    }
    layers_.push_back(std::move(L));
  }
  norm_ = add_param("norm.weight", {D});
  hc_head_fn_ = add_param("hc_head_fn", {n, n * D});
  hc_head_base_ = add_param("hc_head_base", {n});
  hc_head_scale_ = add_param("hc_head_scale", {1});
  head_ = add_param("head.weight", {V, D});
  auto table = [](const std::vector<float>& v) { return torch::tensor(v, torch::kFloat32); };
  inv_freq_main_ = table(rope_inv_freq(cfg.rope_main, cfg.head_dim));
  inv_freq_compress_ = table(rope_inv_freq(cfg.rope_compress, cfg.head_dim));
}

torch::Tensor v4_model::find(const std::string& name) const {
  auto params = named_parameters();
  if (const torch::Tensor* t = params.find(name)) return *t;
  auto buffers = named_buffers();
  if (const torch::Tensor* t = buffers.find(name)) return *t;
  return {};
}

void v4_model::to(torch::Dtype dtype, bool non_blocking) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : parameters()) p.set_data(p.to(dtype, non_blocking));
}

void v4_model::init_random(uint64_t seed, double std) {
  torch::NoGradGuard no_grad;
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (auto& kv : named_parameters()) {
    torch::Tensor& t = kv.value();
    const std::string& name = kv.key();
    if (ends_with(name, "norm.weight") || ends_with(name, "_scale")) {
      t.fill_(1.0);
    } else {
      t.copy_(torch::normal(0.0, std, t.sizes(), gen));
    }
  }
  for (layer_t& L : layers_) {
    if (!L.hash_moe) continue;
    const int64_t V = L.tid2eid.size(0), K = L.tid2eid.size(1);
    for (int64_t v = 0; v < V; ++v) {
      L.tid2eid[v].copy_(torch::randperm(cfg_.n_routed_experts, gen, torch::kLong).narrow(0, 0, K));
    }
  }
}

// -- forward ---------------------------------------------------------------

torch::Tensor v4_model::w(const torch::Tensor& t) const {
  return t.to(compute_dtype_);
}

torch::Tensor v4_model::rms(const torch::Tensor& x, const torch::Tensor& weight) const {
  torch::Tensor y = x * torch::rsqrt(x.pow(2).mean(-1, true) + cfg_.norm_eps);
  return weight.defined() ? y * w(weight) : y;
}

// Interleaved RoPE on the last rope_dim channels; x is [B, S, ..., dim] with
// positions `pos` [S] along dim 1. The angle is an fp32 product, as in the reference.
torch::Tensor v4_model::rope(const torch::Tensor& x, const torch::Tensor& pos, const torch::Tensor& inv_freq,
                             bool inverse) const {
  const int64_t dim = x.size(-1), rd = cfg_.rope_dim, half = rd / 2;
  torch::Tensor angle = pos.to(torch::kFloat32).unsqueeze(1) * inv_freq.unsqueeze(0);  // [S, half]
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = x.size(1);
  shape.back() = half;
  torch::Tensor c = torch::cos(angle).to(x.scalar_type()).view(shape);
  torch::Tensor s = torch::sin(angle).to(x.scalar_type()).view(shape);
  if (inverse) s = -s;
  torch::Tensor pairs = x.narrow(-1, dim - rd, rd).unflatten(-1, {half, 2});
  torch::Tensor a = pairs.select(-1, 0), b = pairs.select(-1, 1);
  torch::Tensor rot = torch::stack({a * c - b * s, b * c + a * s}, -1).flatten(-2);
  return torch::cat({x.narrow(-1, 0, dim - rd), rot}, -1);
}

// Compressed entries of every complete block (v4-model.md §4.4): [B, S/m, c],
// normed and rotated at each block's first position.
torch::Tensor v4_model::compress(const compressor_t& cw, const torch::Tensor& x,
                                 const torch::Tensor& inv_freq) const {
  const int64_t B = x.size(0), S = x.size(1), m = cw.rate, c = cw.dim, n_entries = S / m;
  const int64_t width = cw.overlap ? 2 * c : c;
  if (n_entries == 0) return torch::zeros({B, 0, c}, x.options());
  torch::Tensor xs = x.narrow(1, 0, n_entries * m);
  torch::Tensor a = torch::matmul(xs, w(cw.wkv).t()).view({B, n_entries, m, width});
  torch::Tensor z =
      torch::matmul(xs, w(cw.wgate).t()).view({B, n_entries, m, width}) + w(cw.ape).view({1, 1, m, width});
  if (cw.overlap) {
    // Entry i pools block i-1's A half with block i's B half; block -1 is absent (gate -inf).
    torch::Tensor a0 = torch::zeros({B, 1, m, c}, a.options());
    torch::Tensor z0 = torch::full({B, 1, m, c}, -INFINITY, z.options());
    torch::Tensor prev_a = torch::cat({a0, a.narrow(-1, 0, c).narrow(1, 0, n_entries - 1)}, 1);
    torch::Tensor prev_z = torch::cat({z0, z.narrow(-1, 0, c).narrow(1, 0, n_entries - 1)}, 1);
    a = torch::cat({prev_a, a.narrow(-1, c, c)}, 2);
    z = torch::cat({prev_z, z.narrow(-1, c, c)}, 2);
  }
  torch::Tensor pooled = (torch::softmax(z, 2) * a).sum(2);
  torch::Tensor first = torch::arange(n_entries, torch::TensorOptions().dtype(torch::kLong)) * m;
  return rope(rms(pooled, cw.norm), first, inv_freq, false);
}

// Lightning Indexer scores [B, S, n_entries], entries a position may not see
// at -inf (no gradient, as in the reference).
torch::Tensor v4_model::indexer_score(const layer_t& L, const torch::Tensor& x, const torch::Tensor& qr,
                                      const torch::Tensor& inv_freq, int64_t n_entries) const {
  torch::NoGradGuard no_grad;
  const int64_t B = x.size(0), S = x.size(1), nI = cfg_.index_n_heads, hI = cfg_.index_head_dim;
  torch::Tensor keys = compress(L.index_compressor, x, inv_freq);  // [B, N, hI]
  torch::Tensor pos = torch::arange(S, torch::TensorOptions().dtype(torch::kLong));
  torch::Tensor q = rope(torch::matmul(qr, w(L.index_wq_b).t()).view({B, S, nI, hI}), pos, inv_freq, false);
  torch::Tensor head_w = torch::matmul(x, w(L.index_weights_proj).t()) * (1.0 / std::sqrt(double(nI)));
  torch::Tensor dots = torch::einsum("bthd,bsd->bths", {q, keys});
  torch::Tensor score = (torch::relu(dots) * (1.0 / std::sqrt(double(hI))) * head_w.unsqueeze(-1)).sum(2);
  torch::Tensor visible = entry_visible(S, n_entries, cfg_.csa_rate, x.device());
  return score.masked_fill(visible.logical_not(), -INFINITY);
}

torch::Tensor v4_model::attention(const layer_t& L, int64_t il, const torch::Tensor& x,
                                  const torch::Tensor* forced_picks, indexer_trace* trace) const {
  const int64_t B = x.size(0), S = x.size(1), H = cfg_.n_heads, hd = cfg_.head_dim;
  const torch::Tensor& inv_freq = L.kind == attention_kind::sliding ? inv_freq_main_ : inv_freq_compress_;
  torch::Tensor pos = torch::arange(S, torch::TensorOptions().dtype(torch::kLong));
  torch::Tensor qr = rms(torch::matmul(x, w(L.wq_a).t()), L.q_norm);
  torch::Tensor q = rms(torch::matmul(qr, w(L.wq_b).t()).view({B, S, H, hd}), {});
  q = rope(q, pos, inv_freq, false);
  torch::Tensor kv = rope(rms(torch::matmul(x, w(L.wkv).t()), L.kv_norm), pos, inv_freq, false);

  // Window: raw positions t-W+1..t.
  torch::Tensor t = pos.unsqueeze(1), j = pos.unsqueeze(0);
  torch::Tensor mask = ((j <= t) & (j > t - cfg_.window)).unsqueeze(0).expand({B, S, S});
  torch::Tensor keys = kv;
  if (L.kind != attention_kind::sliding) {
    torch::Tensor entries = compress(L.compressor, x, inv_freq);
    const int64_t n_entries = entries.size(1);
    torch::Tensor seen =
        entry_visible(S, n_entries, L.compressor.rate, x.device()).unsqueeze(0).expand({B, S, n_entries});
    if (L.kind == attention_kind::csa && n_entries > 0) {
      torch::Tensor own;
      if (!forced_picks || trace) {
        torch::Tensor score = indexer_score(L, x, qr, inv_freq, n_entries);
        own = indexer_topk(score, cfg_.index_topk, cfg_.csa_rate);
        if (trace) {
          trace->scores[il] = score;
          trace->picks[il] = own;
        }
      }
      seen = picks_mask(forced_picks ? *forced_picks : own, n_entries, cfg_.csa_rate);
    }
    keys = torch::cat({kv, entries}, 1);
    mask = torch::cat({mask, seen}, 2);
  }
  // One softmax per head over the keys plus the sink logit (value 0, not scaled).
  torch::Tensor logits = torch::einsum("bshd,bkd->bhsk", {q, keys}) * (1.0 / std::sqrt(double(hd)));
  logits = logits.masked_fill(mask.unsqueeze(1).logical_not(), -INFINITY);
  torch::Tensor sink = w(L.attn_sink).view({1, H, 1, 1}).expand({B, H, S, 1});
  torch::Tensor probs = torch::softmax(torch::cat({logits, sink}, -1), -1).narrow(-1, 0, keys.size(1));
  torch::Tensor o = rope(torch::einsum("bhsk,bkd->bshd", {probs, keys}), pos, inv_freq, true);

  // Grouped output projection: group g's heads through wo_a rows g·ol..(g+1)·ol, then wo_b.
  const int64_t G = cfg_.o_groups, ol = cfg_.o_lora_rank, gin = H / G * hd;
  torch::Tensor u =
      torch::einsum("bsgi,goi->bsgo", {o.reshape({B, S, G, gin}), w(L.wo_a).view({G, ol, gin})});
  return torch::matmul(u.reshape({B, S, G * ol}), w(L.wo_b).t());
}

// SwiGLU expert with the reference's clamp: gate <= limit, up in [-limit, limit].
torch::Tensor v4_model::expert(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w3,
                               const torch::Tensor& w2) const {
  torch::Tensor g = torch::matmul(x, w(w1).t()), u = torch::matmul(x, w(w3).t());
  if (cfg_.swiglu_limit > 0) {
    g = torch::clamp_max(g, cfg_.swiglu_limit);
    u = torch::clamp(u, -cfg_.swiglu_limit, cfg_.swiglu_limit);
  }
  return torch::silu(g) * u;  // w2 is applied by the caller after the routing weight
}

torch::Tensor v4_model::moe(const layer_t& L, const torch::Tensor& x, const torch::Tensor& ids,
                            const torch::Tensor* forced_experts) const {
  const int64_t D = cfg_.hidden_size, K = cfg_.n_activated_experts;
  torch::Tensor xf = x.reshape({-1, D});
  const torch::Dtype rd = wide_dtype(compute_dtype_);  // the router runs in fp32 in the reference
  torch::Tensor s = torch::sqrt(torch::softplus(torch::matmul(xf.to(rd), L.gate.to(rd).t())));
  torch::Tensor idx = forced_experts ? forced_experts->reshape({-1, K})
                      : L.hash_moe   ? L.tid2eid.index_select(0, ids.reshape({-1}))
                                     : std::get<1>(torch::topk(s.detach() + L.gate_bias.to(rd), K, -1));
  torch::Tensor ws = s.gather(1, idx);
  ws = (ws / (ws.sum(-1, true) + 1e-20) * cfg_.route_scale).to(compute_dtype_);
  torch::Tensor y = cfg_.n_shared_experts > 0
                        ? torch::matmul(expert(xf, L.shared_w1, L.shared_w3, L.shared_w2), w(L.shared_w2).t())
                        : torch::zeros_like(xf);
  for (int64_t e = 0; e < cfg_.n_routed_experts; ++e) {
    torch::Tensor chose = idx == e;  // [N, K]
    torch::Tensor rows = chose.any(-1).nonzero().squeeze(-1);
    if (rows.numel() == 0) continue;
    torch::Tensor rw = (ws * chose.to(ws.scalar_type())).sum(-1).index_select(0, rows).unsqueeze(-1);
    torch::Tensor h = expert(xf.index_select(0, rows), L.w1[e], L.w3[e], L.w2[e]) * rw;
    y = y.index_add(0, rows, torch::matmul(h, w(L.w2[e]).t()));
  }
  return y.view(x.sizes());
}

status v4_model::check_forced(const forced_routing& f, int64_t B, int64_t S) const {
  auto check = [&](const std::map<int64_t, torch::Tensor>& m, const char* what, bool picks) -> status {
    for (const auto& [il, t] : m) {
      if (il < 0 || il >= int64_t(layers_.size()))
        return invalid_argument("forced %s: no layer %lld", what, (long long)il);
      if (picks && layers_[size_t(il)].kind != attention_kind::csa) {
        return invalid_argument("forced %s: layer %lld is not a CSA layer", what, (long long)il);
      }
      if (!t.defined() || t.scalar_type() != torch::kLong || t.dim() != 3 || t.size(0) != B ||
          t.size(1) != S || (!picks && t.size(2) != cfg_.n_activated_experts)) {
        return invalid_argument("forced %s, layer %lld: want int64 [%lld, %lld, %s]", what, (long long)il,
                                (long long)B, (long long)S,
                                picks ? "k" : std::to_string(cfg_.n_activated_experts).c_str());
      }
      if (t.numel() == 0) continue;
      const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
      const int64_t limit = picks ? S / cfg_.csa_rate : cfg_.n_routed_experts;
      if (lo < (picks ? -1 : 0) || hi >= std::max<int64_t>(limit, picks ? 0 : 1)) {
        return invalid_argument("forced %s, layer %lld: ids in [%lld, %lld], valid [%d, %lld)", what,
                                (long long)il, (long long)lo, (long long)hi, picks ? -1 : 0,
                                (long long)limit);
      }
    }
    return status{};
  };
  HART_RETURN_IF_ERROR(check(f.experts, "experts", false));
  return check(f.picks, "picks", true);
}

status_or<forced_routing> forced_routing_from(const std::vector<protocol::routing_info>& rows, int64_t S) {
  forced_routing f;
  if (rows.empty()) return f;
  const int64_t B = int64_t(rows.size());
  auto gather = [&](auto member, std::map<int64_t, torch::Tensor>& out, bool picks) -> status {
    const auto& first = rows[0].*member;
    for (size_t l = 0; l < first.size(); ++l) {
      const int64_t k = first[l].k;
      torch::Tensor t = picks ? torch::full({B, S, k}, -1, torch::kLong)
                              : torch::arange(k, torch::kLong).view({1, 1, k}).expand({B, S, k}).clone();
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = rows[size_t(b)].positions;
        const auto& layers = rows[size_t(b)].*member;
        if (n > S || layers.size() != first.size() || layers[l].layer != first[l].layer ||
            int64_t(layers[l].k) != k || int64_t(layers[l].ids.size()) != n * k) {
          return invalid_argument(
              "routing row %lld: %lld positions for %lld tokens, or its layers, k or ids differ",
              (long long)b, (long long)n, (long long)S);
        }
        std::copy(layers[l].ids.begin(), layers[l].ids.end(), t[b].data_ptr<int64_t>());
      }
      out[first[l].layer] = t;
    }
    return status{};
  };
  HART_RETURN_IF_ERROR(gather(&protocol::routing_info::experts, f.experts, false));
  HART_RETURN_IF_ERROR(gather(&protocol::routing_info::picks, f.picks, true));
  return f;
}

torch::Tensor v4_model::forward(const torch::Tensor& ids, const forced_routing* forced,
                                indexer_trace* trace) {
  const int64_t B = ids.size(0), S = ids.size(1), D = cfg_.hidden_size, n = cfg_.hc_mult;
  const torch::Dtype hd = wide_dtype(compute_dtype_);
  torch::Tensor X = w(embed_).index_select(0, ids.reshape({-1})).view({B, S, 1, D}).expand({B, S, n, D});
  X = X.to(hd);
  auto site = [&](const torch::Tensor& fn, const torch::Tensor& base, const torch::Tensor& scale,
                  const torch::Tensor& norm, auto&& sublayer) {
    hc_split s = hc_pre(X, fn.to(hd), base.to(hd), scale.to(hd), cfg_);
    torch::Tensor y = sublayer(rms(s.collapsed.to(compute_dtype_), norm));
    X = hc_post(X, y.to(hd), s);
  };
  auto find_forced = [&](const std::map<int64_t, torch::Tensor>* m, int64_t il) -> const torch::Tensor* {
    if (!m) return nullptr;
    auto it = m->find(il);
    return it == m->end() ? nullptr : &it->second;
  };
  for (size_t il = 0; il < layers_.size(); ++il) {
    const layer_t& L = layers_[il];
    const torch::Tensor* picks = find_forced(forced ? &forced->picks : nullptr, int64_t(il));
    const torch::Tensor* experts = find_forced(forced ? &forced->experts : nullptr, int64_t(il));
    site(L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, L.attn_norm,
         [&](const torch::Tensor& x) { return attention(L, int64_t(il), x, picks, trace); });
    site(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, L.ffn_norm,
         [&](const torch::Tensor& x) { return moe(L, x, ids, experts); });
  }
  // Head: sigmoid-weighted collapse of the streams, final norm, LM head.
  torch::Tensor xf = X.flatten(2);
  torch::Tensor mix =
      torch::matmul(xf, hc_head_fn_.to(hd).t()) * torch::rsqrt(xf.pow(2).mean(-1, true) + cfg_.norm_eps);
  torch::Tensor pre = torch::sigmoid(mix * hc_head_scale_.to(hd) + hc_head_base_.to(hd)) + cfg_.hc_eps;
  torch::Tensor u = rms((pre.unsqueeze(-1) * X).sum(2).to(compute_dtype_), norm_);
  return torch::matmul(u, w(head_).t()).to(embed_.scalar_type());
}

}  // namespace hart::training
