#include "runtime/model/config.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace hart {
namespace {

using json = nlohmann::json;

// Reads the first present key of `keys` as a number; absent → `fallback`.
// A present key of the wrong type is an error.
template <typename T>
status read_number(const json& j, std::initializer_list<const char*> keys, T fallback, T* out, bool required,
                   const std::string& origin) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number()) {
      return invalid_argument("%s: '%s' must be a number, got %s", origin.c_str(), k, it->dump().c_str());
    }
    *out = it->get<T>();
    return {};
  }
  if (required) {
    return invalid_argument("%s: missing required key '%s'", origin.c_str(), *keys.begin());
  }
  *out = fallback;
  return {};
}

status parse_layer_kind(const std::string& s, attention_kind* out, const std::string& origin) {
  if (s == "sliding_attention")
    *out = attention_kind::sliding;
  else if (s == "compressed_sparse_attention")
    *out = attention_kind::csa;
  else if (s == "heavily_compressed_attention")
    *out = attention_kind::hca;
  else
    return invalid_argument(
        "%s: unknown layer type '%s' (expected sliding_attention, "
        "compressed_sparse_attention or heavily_compressed_attention)",
        origin.c_str(), s.c_str());
  return {};
}

status parse_rope(const json& r, const std::string& origin, rope_config* out) {
  if (!r.is_object()) return invalid_argument("%s: rope parameters must be an object", origin.c_str());
  HART_RETURN_IF_ERROR(read_number(r, {"rope_theta", "base"}, out->theta, &out->theta, false, origin));
  HART_RETURN_IF_ERROR(read_number(r, {"partial_rotary_factor"}, out->partial_rotary_factor,
                                   &out->partial_rotary_factor, false, origin));
  std::string type = "default";
  for (const char* k : {"rope_type", "type"}) {
    if (r.contains(k) && r[k].is_string()) type = r[k].get<std::string>();
  }
  if (type == "default") {
    out->yarn = false;
    return {};
  }
  if (type != "yarn") {
    return invalid_argument("%s: unsupported rope_type '%s' (default or yarn)", origin.c_str(), type.c_str());
  }
  out->yarn = true;
  HART_RETURN_IF_ERROR(read_number(r, {"factor"}, 1.0, &out->factor, true, origin));
  HART_RETURN_IF_ERROR(read_number(r, {"original_max_position_embeddings"}, int64_t{0},
                                   &out->original_max_position, true, origin));
  HART_RETURN_IF_ERROR(read_number(r, {"beta_fast"}, 32.0, &out->beta_fast, false, origin));
  HART_RETURN_IF_ERROR(read_number(r, {"beta_slow"}, 1.0, &out->beta_slow, false, origin));
  // V4 forces attention_factor 1 (no YaRN magnitude scaling); see v4-model.md §8.3.
  HART_RETURN_IF_ERROR(read_number(r, {"attention_factor"}, 1.0, &out->attention_factor, false, origin));
  return {};
}

status parse_layers(const json& j, model_config* c, const std::string& origin) {
  if (j.contains("compress_rates") && j["compress_rates"].is_object()) {
    const json& r = j["compress_rates"];
    HART_RETURN_IF_ERROR(
        read_number(r, {"compressed_sparse_attention"}, int64_t{4}, &c->csa_rate, false, origin));
    HART_RETURN_IF_ERROR(
        read_number(r, {"heavily_compressed_attention"}, int64_t{128}, &c->hca_rate, false, origin));
  }
  c->layer_kinds.clear();
  if (j.contains("compress_ratios")) {
    // Official form: one ratio per layer (plus one per MTP layer): 0 SWA, 4 CSA, 128 HCA.
    const json& r = j["compress_ratios"];
    if (!r.is_array()) return invalid_argument("%s: 'compress_ratios' must be an array", origin.c_str());
    if ((int64_t)r.size() < c->n_layers) {
      return invalid_argument("%s: 'compress_ratios' has %zu entries, fewer than %lld layers", origin.c_str(),
                              r.size(), (long long)c->n_layers);
    }
    int64_t csa = 0, hca = 0;
    for (int64_t i = 0; i < c->n_layers; ++i) {
      if (!r[i].is_number_integer())
        return invalid_argument("%s: compress_ratios[%lld] is not an integer", origin.c_str(), (long long)i);
      int64_t v = r[i].get<int64_t>();
      if (v == 0) {
        c->layer_kinds.push_back(attention_kind::sliding);
      } else if (csa == 0 || v == csa) {
        // The smaller nonzero ratio is CSA; decided below once both are known.
        c->layer_kinds.push_back(attention_kind::csa);
        csa = v;
      } else if (hca == 0 || v == hca) {
        c->layer_kinds.push_back(attention_kind::hca);
        hca = v;
      } else {
        return invalid_argument("%s: compress_ratios[%lld] = %lld is a third compression ratio",
                                origin.c_str(), (long long)i, (long long)v);
      }
    }
    // Two ratios: the smaller is CSA. One ratio alone (a truncated layout): 4 is
    // CSA, anything else HCA — V4's only overlapping (CSA) rate is 4.
    if (hca == 0 && csa != 0 && csa != 4) {
      for (auto& k : c->layer_kinds) {
        if (k == attention_kind::csa) k = attention_kind::hca;
      }
      std::swap(csa, hca);
    }
    if (csa != 0 && hca != 0 && csa > hca) {
      for (auto& k : c->layer_kinds) {
        if (k != attention_kind::sliding)
          k = k == attention_kind::csa ? attention_kind::hca : attention_kind::csa;
      }
      std::swap(csa, hca);
    }
    if (csa) c->csa_rate = csa;
    if (hca) c->hca_rate = hca;
  } else if (j.contains("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array()) return invalid_argument("%s: 'layer_types' must be an array", origin.c_str());
    if ((int64_t)lt.size() != c->n_layers) {
      return invalid_argument("%s: 'layer_types' has %zu entries but num_hidden_layers is %lld",
                              origin.c_str(), lt.size(), (long long)c->n_layers);
    }
    for (const json& e : lt) {
      if (!e.is_string()) return invalid_argument("%s: layer_types entries must be strings", origin.c_str());
      attention_kind k;
      HART_RETURN_IF_ERROR(parse_layer_kind(e.get<std::string>(), &k, origin));
      c->layer_kinds.push_back(k);
    }
  } else {
    // NOTE: HF's default layout matches no real checkpoint (v4-model.md §1.2); refuse to guess.
    return invalid_argument("%s: neither 'compress_ratios' nor 'layer_types' given", origin.c_str());
  }

  c->layer_hash_moe.assign(c->n_layers, false);
  if (j.contains("mlp_layer_types")) {
    const json& m = j["mlp_layer_types"];
    if (!m.is_array() || (int64_t)m.size() != c->n_layers) {
      return invalid_argument("%s: 'mlp_layer_types' must be an array of %lld entries", origin.c_str(),
                              (long long)c->n_layers);
    }
    for (int64_t i = 0; i < c->n_layers; ++i) {
      std::string t = m[i].is_string() ? m[i].get<std::string>() : "";
      if (t == "hash_moe")
        c->layer_hash_moe[i] = true;
      else if (t != "moe")
        return invalid_argument("%s: unknown mlp layer type '%s' at layer %lld (moe or hash_moe)",
                                origin.c_str(), m[i].dump().c_str(), (long long)i);
    }
  } else {
    int64_t n_hash = 0;
    HART_RETURN_IF_ERROR(
        read_number(j, {"num_hash_layers", "n_hash_layers"}, int64_t{0}, &n_hash, false, origin));
    for (int64_t i = 0; i < c->n_layers && i < n_hash; ++i) c->layer_hash_moe[i] = true;
  }
  return {};
}

}  // namespace

const char* attention_kind_name(attention_kind k) {
  switch (k) {
    case attention_kind::sliding:
      return "SWA";
    case attention_kind::csa:
      return "CSA";
    case attention_kind::hca:
      return "HCA";
  }
  return "?";
}

int64_t model_config::compress_rate(attention_kind k) const {
  return k == attention_kind::csa ? csa_rate : k == attention_kind::hca ? hca_rate : 0;
}

const rope_config& model_config::rope_for(attention_kind k) const {
  return k == attention_kind::sliding ? rope_main : rope_compress;
}

status model_config::validate() const {
  auto positive = [](int64_t v) { return v > 0; };
  struct {
    const char* name;
    int64_t v;
  } required[] = {{"vocab_size", vocab_size},
                  {"hidden_size", hidden_size},
                  {"num_hidden_layers", n_layers},
                  {"num_attention_heads", n_heads},
                  {"head_dim", head_dim},
                  {"q_lora_rank", q_lora_rank},
                  {"o_groups", o_groups},
                  {"o_lora_rank", o_lora_rank},
                  {"sliding_window", window},
                  {"n_routed_experts", n_routed_experts},
                  {"num_experts_per_tok", n_activated_experts},
                  {"moe_intermediate_size", moe_inter_dim},
                  {"hc_mult", hc_mult},
                  {"hc_sinkhorn_iters", hc_sinkhorn_iters}};
  for (const auto& r : required) {
    if (!positive(r.v))
      return invalid_argument("config: '%s' must be positive, got %lld", r.name, (long long)r.v);
  }
  if (rope_dim <= 0 || rope_dim % 2 || rope_dim > head_dim) {
    return invalid_argument("config: rope dims %lld must be even and within head_dim %lld",
                            (long long)rope_dim, (long long)head_dim);
  }
  if (n_heads % o_groups)
    return invalid_argument("config: %lld heads do not split into %lld output groups", (long long)n_heads,
                            (long long)o_groups);
  if (n_activated_experts > n_routed_experts)
    return invalid_argument("config: num_experts_per_tok %lld > n_routed_experts %lld",
                            (long long)n_activated_experts, (long long)n_routed_experts);
  if ((int64_t)layer_kinds.size() != n_layers || (int64_t)layer_hash_moe.size() != n_layers) {
    return invalid_argument("config: layer lists do not cover %lld layers", (long long)n_layers);
  }
  for (attention_kind k : layer_kinds) {
    if (k == attention_kind::csa) {
      if (index_n_heads <= 0 || index_head_dim <= 0 || index_topk <= 0) {
        return invalid_argument("config: CSA layers need index_n_heads, index_head_dim and index_topk");
      }
      if (index_head_dim < rope_dim || (index_head_dim & (index_head_dim - 1))) {
        return invalid_argument("config: index_head_dim %lld must be a power of two >= rope dims %lld",
                                (long long)index_head_dim, (long long)rope_dim);
      }
      if (csa_rate <= 0) return invalid_argument("config: CSA compress rate must be positive");
    }
    if (k == attention_kind::hca && hca_rate <= 0)
      return invalid_argument("config: HCA compress rate must be positive");
  }
  for (const rope_config* r : {&rope_main, &rope_compress}) {
    if (r->theta <= 0) return invalid_argument("config: rope theta must be positive");
    if (r->yarn && (r->factor <= 0 || r->original_max_position <= 0)) {
      return invalid_argument("config: yarn needs a positive factor and original_max_position_embeddings");
    }
  }
  return {};
}

std::string model_config::summary() const {
  std::ostringstream s;
  s << "DeepSeek-V4 " << n_layers << " layers (";
  for (int64_t i = 0; i < n_layers; ++i)
    s << (i ? "," : "") << attention_kind_name(layer_kinds[i]) << (layer_hash_moe[i] ? "/hash" : "");
  s << ") D=" << hidden_size << " H=" << n_heads << "x" << head_dim << " experts " << n_routed_experts
    << " top-" << n_activated_experts << " vocab " << vocab_size << " window " << window;
  return s.str();
}

status model_config_same_shapes(const model_config& a, const model_config& b, const std::string& origin) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> ints[] = {
      {"vocab_size", {a.vocab_size, b.vocab_size}},
      {"hidden_size", {a.hidden_size, b.hidden_size}},
      {"num_hidden_layers", {a.n_layers, b.n_layers}},
      {"num_attention_heads", {a.n_heads, b.n_heads}},
      {"head_dim", {a.head_dim, b.head_dim}},
      {"qk_rope_head_dim", {a.rope_dim, b.rope_dim}},
      {"q_lora_rank", {a.q_lora_rank, b.q_lora_rank}},
      {"o_groups", {a.o_groups, b.o_groups}},
      {"o_lora_rank", {a.o_lora_rank, b.o_lora_rank}},
      {"sliding_window", {a.window, b.window}},
      {"index_n_heads", {a.index_n_heads, b.index_n_heads}},
      {"index_head_dim", {a.index_head_dim, b.index_head_dim}},
      {"index_topk", {a.index_topk, b.index_topk}},
      {"n_routed_experts", {a.n_routed_experts, b.n_routed_experts}},
      {"n_shared_experts", {a.n_shared_experts, b.n_shared_experts}},
      {"num_experts_per_tok", {a.n_activated_experts, b.n_activated_experts}},
      {"moe_intermediate_size", {a.moe_inter_dim, b.moe_inter_dim}},
      {"hc_mult", {a.hc_mult, b.hc_mult}},
  };
  for (const auto& [name, v] : ints) {
    if (v.first != v.second) {
      return invalid_argument("%s: %s is %lld, the served model's is %lld", origin.c_str(), name,
                              (long long)v.second, (long long)v.first);
    }
  }
  // The rest (layer kinds and hash layers, compress rates, routing and RoPE numbers) as the one-line summary
  // and the numbers it leaves out.
  const auto rope_same = [](const rope_config& x, const rope_config& y) {
    return x.theta == y.theta && x.yarn == y.yarn && x.factor == y.factor &&
           x.original_max_position == y.original_max_position &&
           x.partial_rotary_factor == y.partial_rotary_factor;
  };
  if (a.summary() != b.summary() || a.csa_rate != b.csa_rate || a.hca_rate != b.hca_rate) {
    return invalid_argument("%s: %s; the served model is %s", origin.c_str(), b.summary().c_str(),
                            a.summary().c_str());
  }
  if (a.route_scale != b.route_scale || a.swiglu_limit != b.swiglu_limit || a.norm_eps != b.norm_eps ||
      !rope_same(a.rope_main, b.rope_main) || !rope_same(a.rope_compress, b.rope_compress)) {
    return invalid_argument(
        "%s: routed_scaling_factor, swiglu_limit, rms_norm_eps or the RoPE settings differ from "
        "the served model's",
        origin.c_str());
  }
  return {};
}

status_or<model_config> model_config_parse(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return invalid_argument("%s: not valid JSON: %s", origin.c_str(), e.what());
  }
  if (!j.is_object()) return invalid_argument("%s: top level must be a JSON object", origin.c_str());
  if (j.contains("model_type") && j["model_type"].is_string()) {
    std::string mt = j["model_type"].get<std::string>();
    if (mt != "deepseek_v4") {
      return invalid_argument("%s: model_type '%s' is not deepseek_v4", origin.c_str(), mt.c_str());
    }
  }
  model_config c;
  const std::string& o = origin;
  HART_RETURN_IF_ERROR(read_number(j, {"vocab_size"}, int64_t{0}, &c.vocab_size, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"hidden_size", "dim"}, int64_t{0}, &c.hidden_size, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"num_hidden_layers", "n_layers"}, int64_t{0}, &c.n_layers, true, o));
  HART_RETURN_IF_ERROR(
      read_number(j, {"num_nextn_predict_layers", "n_mtp_layers"}, int64_t{0}, &c.n_mtp_layers, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"num_attention_heads", "n_heads"}, int64_t{0}, &c.n_heads, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"head_dim"}, int64_t{0}, &c.head_dim, true, o));
  HART_RETURN_IF_ERROR(
      read_number(j, {"qk_rope_head_dim", "rope_head_dim"}, int64_t{0}, &c.rope_dim, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"q_lora_rank"}, int64_t{0}, &c.q_lora_rank, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"o_groups"}, int64_t{0}, &c.o_groups, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"o_lora_rank"}, int64_t{0}, &c.o_lora_rank, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"sliding_window", "window_size"}, int64_t{128}, &c.window, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"index_n_heads"}, int64_t{0}, &c.index_n_heads, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"index_head_dim"}, int64_t{0}, &c.index_head_dim, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"index_topk"}, int64_t{0}, &c.index_topk, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"n_routed_experts"}, int64_t{0}, &c.n_routed_experts, true, o));
  HART_RETURN_IF_ERROR(read_number(j, {"n_shared_experts"}, int64_t{1}, &c.n_shared_experts, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"num_experts_per_tok", "n_activated_experts"}, int64_t{0},
                                   &c.n_activated_experts, true, o));
  HART_RETURN_IF_ERROR(
      read_number(j, {"moe_intermediate_size", "moe_inter_dim"}, int64_t{0}, &c.moe_inter_dim, true, o));
  HART_RETURN_IF_ERROR(
      read_number(j, {"routed_scaling_factor", "route_scale"}, 1.0, &c.route_scale, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"swiglu_limit"}, 0.0, &c.swiglu_limit, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"hc_mult"}, int64_t{4}, &c.hc_mult, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"hc_sinkhorn_iters"}, int64_t{20}, &c.hc_sinkhorn_iters, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"hc_eps"}, 1e-6, &c.hc_eps, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"rms_norm_eps", "norm_eps"}, 1e-6, &c.norm_eps, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"max_position_embeddings"}, int64_t{0}, &c.max_position, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"bos_token_id"}, int32_t{0}, &c.bos_token_id, false, o));
  HART_RETURN_IF_ERROR(read_number(j, {"eos_token_id"}, int32_t{1}, &c.eos_token_id, false, o));
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()) {
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  for (const char* k : {"scoring_func", "score_func"}) {
    if (j.contains(k) && j[k].is_string() && j[k].get<std::string>() != "sqrtsoftplus") {
      return invalid_argument("%s: %s '%s' is not supported (sqrtsoftplus)", o.c_str(), k,
                              j[k].get<std::string>().c_str());
    }
  }

  double partial = 0;
  HART_RETURN_IF_ERROR(read_number(j, {"partial_rotary_factor"}, 0.0, &partial, false, o));
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      j["rope_parameters"].contains("main")) {
    const json& rp = j["rope_parameters"];
    HART_RETURN_IF_ERROR(parse_rope(rp["main"], o, &c.rope_main));
    if (!rp.contains("compress")) return invalid_argument("%s: rope_parameters lacks 'compress'", o.c_str());
    HART_RETURN_IF_ERROR(parse_rope(rp["compress"], o, &c.rope_compress));
  } else {
    // Official form: rope_theta (SWA layers) + compress_rope_theta with rope_scaling (YaRN).
    HART_RETURN_IF_ERROR(read_number(j, {"rope_theta"}, 10000.0, &c.rope_main.theta, false, o));
    c.rope_compress = c.rope_main;
    HART_RETURN_IF_ERROR(
        read_number(j, {"compress_rope_theta"}, c.rope_main.theta, &c.rope_compress.theta, false, o));
    for (const char* k : {"rope_scaling", "rope_parameters"}) {
      if (j.contains(k) && j[k].is_object()) {
        json r = j[k];
        r["rope_theta"] = c.rope_compress.theta;
        HART_RETURN_IF_ERROR(parse_rope(r, o, &c.rope_compress));
        break;
      }
    }
    if (j.contains("rope_factor") && !j.contains("rope_scaling")) {
      // inference/config.json (ModelArgs): flat YaRN keys for the compressed layers.
      json r = {{"rope_type", "yarn"},
                {"rope_theta", c.rope_compress.theta},
                {"factor", j["rope_factor"]},
                {"original_max_position_embeddings", j.value("original_seq_len", json())},
                {"beta_fast", j.value("beta_fast", 32.0)},
                {"beta_slow", j.value("beta_slow", 1.0)}};
      HART_RETURN_IF_ERROR(parse_rope(r, o, &c.rope_compress));
    }
    if (partial > 0) c.rope_main.partial_rotary_factor = c.rope_compress.partial_rotary_factor = partial;
  }
  if (c.rope_dim == 0) {
    c.rope_dim = static_cast<int64_t>(c.head_dim * c.rope_main.partial_rotary_factor);
  } else if (partial == 0 && c.rope_main.partial_rotary_factor == 1.0) {
    c.rope_main.partial_rotary_factor = c.rope_compress.partial_rotary_factor =
        static_cast<double>(c.rope_dim) / static_cast<double>(c.head_dim);
  }
  HART_RETURN_IF_ERROR(parse_layers(j, &c, o));
  HART_RETURN_IF_ERROR(c.validate());
  return c;
}

namespace {

status read_config_text(const std::string& path, std::string* file, std::string* text) {
  *file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) *file = path + "/config.json";
  std::ifstream in(*file);
  if (!in) return not_found("cannot open model config '%s'", file->c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return {};
}

}  // namespace

status_or<model_config> model_config_load(const std::string& path) {
  std::string file, text;
  HART_RETURN_IF_ERROR(read_config_text(path, &file, &text));
  return model_config_parse(text, file);
}

status_or<model_config> model_config_load_layers(const std::string& path, int64_t layers,
                                                 int64_t hash_layers) {
  std::string file, text;
  HART_RETURN_IF_ERROR(read_config_text(path, &file, &text));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("%s is not a JSON object", file.c_str());
  if (layers < 1) return invalid_argument("%s: %lld layers, need >= 1", file.c_str(), (long long)layers);
  if (hash_layers < 0 || hash_layers > layers) {
    return invalid_argument("%s: %lld hash-routed layers must be in [0, %lld]", file.c_str(),
                            (long long)hash_layers, (long long)layers);
  }
  nlohmann::json ratios = nlohmann::json::array();
  for (int64_t il = 0; il < layers; ++il) ratios.push_back(il == 0 ? 0 : (il % 2 ? 4 : 128));
  for (int64_t k = 0; k < j.value("num_nextn_predict_layers", 0); ++k) ratios.push_back(0);  // MTP: SWA
  j["num_hidden_layers"] = layers;
  j["compress_ratios"] = ratios;
  j["num_hash_layers"] = hash_layers;
  return model_config_parse(j.dump(), file + " (" + std::to_string(layers) + " layers)");
}

}  // namespace hart
