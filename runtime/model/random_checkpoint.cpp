#include "runtime/model/random_checkpoint.h"

#include "kernels/quant/quant.h"
#include "runtime/core/codecs.h"
#include "runtime/model/config.h"
#include "runtime/model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

namespace hart {
namespace {

// How a linear's weight is stored.
enum class storage { bf16, fp8, mxfp4 };

// Tensors in the order the loader reads them (runtime/model/weights.cpp),
// written shard by shard so that host memory stays at one shard.
class writer {
 public:
  writer(const std::string& dir, const random_checkpoint_options& o)
      : dir_(dir), opt_(o), state_(o.seed * 0x9E3779B97F4A7C15ull + 1) {}

  bool release() const { return opt_.format == checkpoint_format::release; }

  void f32(const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    const std::vector<float>& v = draw(numel(shape), lo, hi);
    add(name, dtype::f32, std::move(shape), v.data(), v.size() * sizeof(float));
  }

  // F32 in the bf16 format, BF16 in the release (norms, the embedding).
  void f32_or_bf16(const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    if (!release()) return f32(name, std::move(shape), lo, hi);
    const std::vector<float>& v = draw(numel(shape), lo, hi);
    bf16(name, std::move(shape), v);
  }

  void linear(const std::string& name, int64_t out, int64_t in, storage how) {
    const float a = std::sqrt(3.0f / float(in));  // uniform ±a: standard deviation in^-1/2
    const std::vector<float>& v = draw(out * in, -a, a);
    if (!release() || how == storage::bf16) return bf16(name, {out, in}, v);
    if (how == storage::fp8) {
      if (out % 128 || in % 128) {
        fail(invalid_argument("random checkpoint: FP8 tensor '%s' is [%lld, %lld], not multiples of 128",
                              name.c_str(), (long long)out, (long long)in));
        return;
      }
      std::vector<uint8_t> q(size_t(out * in)), s(size_t(out / 128 * (in / 128)));
      fail(by_row_blocks(out, [&](int64_t r, int64_t n) {
        return fp8_block_quantize(v.data() + r * in, n, in, 128, q.data() + r * in,
                                  s.data() + r / 128 * (in / 128));
      }));
      add(name, dtype::e4m3, {out, in}, std::move(q));
      add(scale_name(name), dtype::e8m0, {out / 128, in / 128}, std::move(s));
      return;
    }
    if (in % 32) {
      fail(invalid_argument("random checkpoint: MXFP4 tensor '%s' has %lld columns, not a multiple of 32",
                            name.c_str(), (long long)in));
      return;
    }
    std::vector<uint8_t> q(size_t(out * in / 2)), s(size_t(out * (in / 32)));
    fail(by_row_blocks(out, [&](int64_t r, int64_t n) {
      return mxfp4_quantize(v.data() + r * in, n, in, q.data() + r * in / 2, s.data() + r * (in / 32));
    }));
    add(name, dtype::i8, {out, in / 2}, std::move(q));
    add(scale_name(name), dtype::e8m0, {out, in / 32}, std::move(s));
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

  // Writes the last shard, names the shards and, when there are several, the index.
  status finish() {
    HART_RETURN_IF_ERROR(flush());
    if (!release()) return {};
    const size_t n = shard_files_.size();
    nlohmann::json index;
    index["metadata"]["total_size"] = total_bytes_;
    std::map<std::string, std::string> final_name;
    for (size_t i = 0; i < n; ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
      final_name[shard_files_[i]] = buf;
      std::error_code ec;
      std::filesystem::rename(dir_ + "/" + shard_files_[i], dir_ + "/" + buf, ec);
      if (ec)
        return internal_error("random checkpoint: cannot rename %s: %s", shard_files_[i].c_str(),
                              ec.message().c_str());
    }
    for (const auto& [tensor, file] : shard_of_) index["weight_map"][tensor] = final_name[file];
    std::ofstream out(dir_ + "/model.safetensors.index.json");
    out << index.dump(1) << "\n";
    if (!out)
      return internal_error("random checkpoint: cannot write %s/model.safetensors.index.json", dir_.c_str());
    return {};
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
  static std::string scale_name(const std::string& weight) {
    return weight.substr(0, weight.size() - std::string(".weight").size()) + ".scale";
  }
  // The next n uniforms of the stream, on every core: splitmix64's i-th output
  // depends only on state + i·gamma, so the bytes do not depend on the thread count.
  // Into one buffer kept across tensors: a fresh one per expert faulted in ~25 GB of pages
  // per V4-Flash layer, on one core.
  const std::vector<float>& draw(int64_t n, float lo, float hi) {
    std::vector<float>& v = draw_buffer_;
    v.resize(static_cast<size_t>(n));
    const uint64_t base = state_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      v[size_t(i)] = lo + (hi - lo) * unit(mix(base + uint64_t(i + 1) * k_gamma));
    if (opt_.bf16_values) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = round_to_bf16(v[size_t(i)]);
    }
    state_ = base + uint64_t(n) * k_gamma;
    return v;
  }
  void bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(uint16_t));
    auto* out = reinterpret_cast<uint16_t*>(b.data());
    const int64_t n = int64_t(v.size()), chunk = int64_t(1) << 20;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += chunk) f32_to_bf16(v.data() + i, out + i, std::min(chunk, n - i));
    add(name, dtype::bf16, std::move(shape), std::move(b));
  }
  // quantize(first_row, rows) over blocks of 128 rows (the FP8 tile height) on every core.
  template <class F>
  status by_row_blocks(int64_t rows, F quantize) {
    const int64_t blocks = (rows + 127) / 128;
    std::vector<status> errors(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t b = 0; b < blocks; ++b)
      errors[size_t(b)] = quantize(b * 128, std::min<int64_t>(128, rows - b * 128));
    for (const status& e : errors) HART_RETURN_IF_ERROR(e);
    return {};
  }
  void fail(const status& s) {
    if (!s.ok() && error_.ok()) error_ = s;
  }
  void add(const std::string& name, dtype type, std::vector<int64_t> shape, const void* data, size_t n) {
    std::vector<uint8_t> bytes(n);
    std::memcpy(bytes.data(), data, n);
    add(name, type, std::move(shape), std::move(bytes));
  }
  // Takes the bytes as they are (no copy).
  void add(const std::string& name, dtype type, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    const size_t n = bytes.size();
    owned o{name, type, std::move(shape), std::move(bytes)};
    shard_bytes_ += int64_t(n);
    total_bytes_ += int64_t(n);
    pending_.push_back(std::move(o));
    if (release() && opt_.shard_bytes > 0 && shard_bytes_ >= opt_.shard_bytes) fail(flush());
  }
  status flush() {
    HART_RETURN_IF_ERROR(error_);
    if (pending_.empty() && !shard_files_.empty()) return {};
    const std::string file =
        release() ? "shard-" + std::to_string(shard_files_.size()) + ".tmp" : "model.safetensors";
    std::vector<tensor_to_write> t;
    for (const owned& o : pending_) {
      t.push_back({o.name, o.type, o.shape, o.bytes.data(), o.bytes.size()});
      shard_of_[o.name] = file;
    }
    HART_RETURN_IF_ERROR(safetensors_write(dir_ + "/" + file, t, {{"format", "pt"}}));
    shard_files_.push_back(file);
    pending_.clear();
    shard_bytes_ = 0;
    return {};
  }
  static constexpr uint64_t k_gamma = 0x9E3779B97F4A7C15ull;
  static uint64_t mix(uint64_t z) {  // splitmix64's output of state z
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static float unit(uint64_t r) {
    return float(r >> 40) * 0x1p-24f;
  }  // [0, 1)
  uint64_t next() {
    return mix(state_ += k_gamma);
  }

  std::string dir_;
  random_checkpoint_options opt_;
  uint64_t state_;
  status error_;
  std::vector<owned> pending_;
  std::vector<float> draw_buffer_;  // draw()'s values, reused
  int64_t shard_bytes_ = 0, total_bytes_ = 0;
  std::vector<std::string> shard_files_;
  std::map<std::string, std::string> shard_of_;
};

void compressor(writer& w, const std::string& p, int64_t D, int64_t rate, int64_t dim, bool overlap) {
  const int64_t width = (overlap ? 2 : 1) * dim;
  w.linear(p + ".wkv.weight", width, D, storage::bf16);
  w.linear(p + ".wgate.weight", width, D, storage::bf16);
  w.f32(p + ".ape", {rate, width}, -0.1f, 0.1f);
  w.f32_or_bf16(p + ".norm.weight", {dim}, 0.9f, 1.1f);
}

void expert(writer& w, const std::string& p, int64_t D, int64_t inter, storage how) {
  w.linear(p + ".w1.weight", inter, D, how);
  w.linear(p + ".w3.weight", inter, D, how);
  w.linear(p + ".w2.weight", D, inter, how);
}

// One block under `p` ("layers.3", "mtp.0").
void block(writer& w, const model_config& c, const std::string& p, attention_kind kind, bool hash_moe) {
  const int64_t D = c.hidden_size, n = c.hc_mult, H = c.n_heads, hd = c.head_dim, n_mix = (2 + n) * n;
  const float fn = 1.0f / std::sqrt(float(n * D));
  for (const char* site : {"attn", "ffn"}) {
    w.f32(p + ".hc_" + site + "_fn", {n_mix, n * D}, -fn, fn);
    w.f32(p + ".hc_" + site + "_base", {n_mix}, -0.1f, 0.1f);
    w.f32(p + ".hc_" + site + "_scale", {3}, 0.05f, 0.15f);
  }
  w.f32_or_bf16(p + ".attn_norm.weight", {D}, 0.9f, 1.1f);
  w.f32_or_bf16(p + ".ffn_norm.weight", {D}, 0.9f, 1.1f);
  const std::string a = p + ".attn";
  w.linear(a + ".wq_a.weight", c.q_lora_rank, D, storage::fp8);
  w.f32_or_bf16(a + ".q_norm.weight", {c.q_lora_rank}, 0.9f, 1.1f);
  w.linear(a + ".wq_b.weight", H * hd, c.q_lora_rank, storage::fp8);
  w.linear(a + ".wkv.weight", hd, D, storage::fp8);
  w.f32_or_bf16(a + ".kv_norm.weight", {hd}, 0.9f, 1.1f);
  w.linear(a + ".wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, storage::fp8);
  w.linear(a + ".wo_b.weight", D, c.o_groups * c.o_lora_rank, storage::fp8);
  w.f32(a + ".attn_sink", {H}, -1.0f, 1.0f);
  if (kind != attention_kind::sliding) {
    const bool csa = kind == attention_kind::csa;
    compressor(w, a + ".compressor", D, c.compress_rate(kind), hd, csa);
    if (csa) {
      const std::string x = a + ".indexer";
      w.linear(x + ".wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, storage::fp8);
      w.linear(x + ".weights_proj.weight", c.index_n_heads, D, storage::bf16);
      compressor(w, x + ".compressor", D, c.csa_rate, c.index_head_dim, true);
    }
  }
  const std::string f = p + ".ffn";
  w.linear(f + ".gate.weight", c.n_routed_experts, D, storage::bf16);
  if (hash_moe) {
    w.tid2eid(f + ".gate.tid2eid", c.vocab_size, c.n_activated_experts, c.n_routed_experts);
  } else {
    w.f32(f + ".gate.bias", {c.n_routed_experts}, -0.01f, 0.01f);
  }
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    expert(w, f + ".experts." + std::to_string(e), D, c.moe_inter_dim, storage::mxfp4);
  }
  if (c.n_shared_experts > 0)
    expert(w, f + ".shared_experts", D, c.moe_inter_dim * c.n_shared_experts, storage::fp8);
}

void hc_head(writer& w, const model_config& c, const std::string& prefix) {
  const int64_t D = c.hidden_size, n = c.hc_mult;
  const float fn = 1.0f / std::sqrt(float(n * D));
  w.f32(prefix + "hc_head_fn", {n, n * D}, -fn, fn);
  w.f32(prefix + "hc_head_base", {n}, -0.1f, 0.1f);
  w.f32(prefix + "hc_head_scale", {1}, 0.05f, 0.15f);
}

// MTP block `i` (v4-model.md §7): a score-routed sliding-window block, its input projections
// (FP8 in the release), norms and mHC head; it shares the model's embedding and head.
void mtp(writer& w, const model_config& c, int64_t i) {
  const std::string p = "mtp." + std::to_string(i);
  const int64_t D = c.hidden_size;
  block(w, c, p, attention_kind::sliding, false);
  w.linear(p + ".e_proj.weight", D, D, storage::fp8);
  w.linear(p + ".h_proj.weight", D, D, storage::fp8);
  for (const char* norm : {".enorm.weight", ".hnorm.weight", ".norm.weight"}) {
    w.f32_or_bf16(p + norm, {D}, 0.9f, 1.1f);
  }
  hc_head(w, c, p + ".");
}

}  // namespace

bool checkpoint_format_parse(const std::string& s, checkpoint_format* out) {
  if (s == "bf16")
    *out = checkpoint_format::bf16;
  else if (s == "release")
    *out = checkpoint_format::release;
  else
    return false;
  return true;
}

status random_checkpoint_truncate_layers(nlohmann::json& c, int64_t n) {
  const int64_t have = c.value("num_hidden_layers", int64_t(0));
  if (n < 1 || n > have) {
    return invalid_argument("%lld layers asked for: the config has %lld", (long long)n, (long long)have);
  }
  c["num_hidden_layers"] = n;
  for (const char* key : {"compress_ratios", "layer_types", "mlp_layer_types"}) {
    if (c.contains(key) && c[key].is_array() && int64_t(c[key].size()) > n) {
      nlohmann::json& a = c[key];
      a.erase(a.begin() + n, a.end());
    }
  }
  if (c.value("num_hash_layers", int64_t(0)) > n) c["num_hash_layers"] = n;
  return {};
}

status random_checkpoint_write(const std::string& dir, const nlohmann::json& config,
                               const random_checkpoint_options& options) {
  HART_ASSIGN_OR_RETURN(model_config c, model_config_parse(config.dump(), dir + "/config.json"));
  if (options.shard_bytes < 0)
    return invalid_argument("random checkpoint: shard_bytes %lld < 0", (long long)options.shard_bytes);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("random checkpoint: cannot create %s: %s", dir.c_str(), ec.message().c_str());
  nlohmann::json written = config;
  if (options.format == checkpoint_format::release) {
    written["expert_dtype"] = "fp4";
    written["torch_dtype"] = "bfloat16";
    written["quantization_config"] = {{"activation_scheme", "dynamic"},
                                      {"fmt", "e4m3"},
                                      {"quant_method", "fp8"},
                                      {"scale_fmt", "ue8m0"},
                                      {"weight_block_size", {128, 128}}};
  }
  {
    std::ofstream out(dir + "/config.json");
    out << written.dump(1) << "\n";
    if (!out) return internal_error("random checkpoint: cannot write %s/config.json", dir.c_str());
  }
  writer w(dir, options);
  const int64_t D = c.hidden_size, V = c.vocab_size;
  w.f32_or_bf16("embed.weight", {V, D}, -1.0f, 1.0f);
  w.linear("head.weight", V, D, storage::bf16);
  w.f32_or_bf16("norm.weight", {D}, 0.9f, 1.1f);
  hc_head(w, c, "");
  for (int64_t il = 0; il < c.n_layers; ++il) {
    block(w, c, "layers." + std::to_string(il), c.layer_kinds[size_t(il)], c.layer_hash_moe[size_t(il)]);
  }
  // After the layers, so that the layers' values do not depend on whether MTP blocks follow.
  for (int64_t i = 0; i < c.n_mtp_layers; ++i) mtp(w, c, i);
  return w.finish();
}

}  // namespace hart
