#include "tests/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "runtime/core/codecs.h"
#include "runtime/model/config.h"
#include "runtime/model/safetensors.h"

namespace hart::testing {
namespace {

// The tensors in the order the loader reads them (runtime/model/weights.cpp).
class writer {
 public:
  explicit writer(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}

  void f32(const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    std::vector<float> v(size_t(numel(shape)));
    for (float& x : v) x = lo + (hi - lo) * uniform();
    add(name, dtype::f32, std::move(shape), v.data(), v.size() * sizeof(float));
  }

  void linear(const std::string& name, int64_t out, int64_t in) {
    const float a = std::sqrt(3.0f / float(in));  // uniform ±a: standard deviation in^-1/2
    std::vector<float> v(size_t(out * in));
    for (float& x : v) x = a * (2.0f * uniform() - 1.0f);
    std::vector<uint16_t> b(v.size());
    f32_to_bf16(v.data(), b.data(), int64_t(v.size()));
    add(name, dtype::bf16, {out, in}, b.data(), b.size() * sizeof(uint16_t));
  }

  // K distinct experts per token: a random start and a stride coprime to E.
  void tid2eid(const std::string& name, int64_t vocab, int64_t k, int64_t experts) {
    int64_t stride = experts / 2 + 1;
    while (std::gcd(stride, experts) != 1) ++stride;
    std::vector<int32_t> v(size_t(vocab * k));
    for (int64_t t = 0; t < vocab; ++t) {
      const int64_t e0 = int64_t(next() % uint64_t(experts));
      for (int64_t j = 0; j < k; ++j) v[size_t(t * k + j)] = int32_t((e0 + j * stride) % experts);
    }
    add(name, dtype::i32, {vocab, k}, v.data(), v.size() * sizeof(int32_t));
  }

  status write(const std::string& path) const {
    std::vector<tensor_to_write> t;
    for (const owned& o : tensors_) t.push_back({o.name, o.type, o.shape, o.bytes.data(), o.bytes.size()});
    return safetensors_write(path, t, {{"format", "pt"}});
  }

 private:
  struct owned {
    std::string name;
    dtype type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };

  static int64_t numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void add(const std::string& name, dtype type, std::vector<int64_t> shape, const void* data, size_t n) {
    owned o{name, type, std::move(shape), std::vector<uint8_t>(n)};
    std::memcpy(o.bytes.data(), data, n);
    tensors_.push_back(std::move(o));
  }
  uint64_t next() {  // splitmix64: fast enough for a GB of weights
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * 0x1p-24f; }  // [0, 1)

  uint64_t state_;
  std::vector<owned> tensors_;
};

void compressor(writer& w, const std::string& p, int64_t D, int64_t rate, int64_t dim, bool overlap) {
  const int64_t width = (overlap ? 2 : 1) * dim;
  w.linear(p + ".wkv.weight", width, D);
  w.linear(p + ".wgate.weight", width, D);
  w.f32(p + ".ape", {rate, width}, -0.1f, 0.1f);
  w.f32(p + ".norm.weight", {dim}, 0.9f, 1.1f);
}

void expert(writer& w, const std::string& p, int64_t D, int64_t inter) {
  w.linear(p + ".w1.weight", inter, D);
  w.linear(p + ".w3.weight", inter, D);
  w.linear(p + ".w2.weight", D, inter);
}

void layer(writer& w, const model_config& c, int64_t il) {
  const std::string p = "layers." + std::to_string(il);
  const int64_t D = c.hidden_size, n = c.hc_mult, H = c.n_heads, hd = c.head_dim, n_mix = (2 + n) * n;
  const float fn = 1.0f / std::sqrt(float(n * D));
  for (const char* site : {"attn", "ffn"}) {
    w.f32(p + ".hc_" + site + "_fn", {n_mix, n * D}, -fn, fn);
    w.f32(p + ".hc_" + site + "_base", {n_mix}, -0.1f, 0.1f);
    w.f32(p + ".hc_" + site + "_scale", {3}, 0.05f, 0.15f);
  }
  w.f32(p + ".attn_norm.weight", {D}, 0.9f, 1.1f);
  w.f32(p + ".ffn_norm.weight", {D}, 0.9f, 1.1f);
  const std::string a = p + ".attn";
  w.linear(a + ".wq_a.weight", c.q_lora_rank, D);
  w.f32(a + ".q_norm.weight", {c.q_lora_rank}, 0.9f, 1.1f);
  w.linear(a + ".wq_b.weight", H * hd, c.q_lora_rank);
  w.linear(a + ".wkv.weight", hd, D);
  w.f32(a + ".kv_norm.weight", {hd}, 0.9f, 1.1f);
  w.linear(a + ".wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups);
  w.linear(a + ".wo_b.weight", D, c.o_groups * c.o_lora_rank);
  w.f32(a + ".attn_sink", {H}, -1.0f, 1.0f);
  const attention_kind kind = c.layer_kinds[size_t(il)];
  if (kind != attention_kind::sliding) {
    const bool csa = kind == attention_kind::csa;
    compressor(w, a + ".compressor", D, c.compress_rate(kind), hd, csa);
    if (csa) {
      const std::string x = a + ".indexer";
      w.linear(x + ".wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      w.linear(x + ".weights_proj.weight", c.index_n_heads, D);
      compressor(w, x + ".compressor", D, c.csa_rate, c.index_head_dim, true);
    }
  }
  const std::string f = p + ".ffn";
  w.linear(f + ".gate.weight", c.n_routed_experts, D);
  if (c.layer_hash_moe[size_t(il)]) {
    w.tid2eid(f + ".gate.tid2eid", c.vocab_size, c.n_activated_experts, c.n_routed_experts);
  } else {
    w.f32(f + ".gate.bias", {c.n_routed_experts}, -0.01f, 0.01f);
  }
  for (int64_t e = 0; e < c.n_routed_experts; ++e) expert(w, f + ".experts." + std::to_string(e), D, c.moe_inter_dim);
  if (c.n_shared_experts > 0) expert(w, f + ".shared_experts", D, c.moe_inter_dim * c.n_shared_experts);
}

}  // namespace

status random_checkpoint_write(const std::string& dir, const nlohmann::json& config, uint64_t seed) {
  HART_ASSIGN_OR_RETURN(model_config c, model_config_parse(config.dump(), dir + "/config.json"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("random checkpoint: cannot create %s: %s", dir.c_str(), ec.message().c_str());
  {
    std::ofstream out(dir + "/config.json");
    out << config.dump(1) << "\n";
    if (!out) return internal_error("random checkpoint: cannot write %s/config.json", dir.c_str());
  }
  writer w(seed);
  const int64_t D = c.hidden_size, V = c.vocab_size, n = c.hc_mult;
  w.f32("embed.weight", {V, D}, -1.0f, 1.0f);
  w.linear("head.weight", V, D);
  w.f32("norm.weight", {D}, 0.9f, 1.1f);
  const float fn = 1.0f / std::sqrt(float(n * D));
  w.f32("hc_head_fn", {n, n * D}, -fn, fn);
  w.f32("hc_head_base", {n}, -0.1f, 0.1f);
  w.f32("hc_head_scale", {1}, 0.05f, 0.15f);
  for (int64_t il = 0; il < c.n_layers; ++il) layer(w, c, il);
  return w.write(dir + "/model.safetensors");
}

}  // namespace hart::testing
