#include "runtime/http/sglang_api.h"

#include "runtime/http/api_error.h"
#include "runtime/http/openai_api.h"
#include "runtime/protocol/validate.h"

#include <algorithm>
#include <cmath>

namespace hart::http {
namespace {

// SGLang's default (sampling_params.py).
constexpr uint32_t k_default_max_new_tokens = 128;

status parse_sampling(const json& sp, sglang_request* r) {
  json_fields f(sp, "sampling_params.");
  HART_RETURN_IF_ERROR(f.only({"max_new_tokens",
                               "min_new_tokens",
                               "temperature",
                               "top_p",
                               "top_k",
                               "min_p",
                               "stop",
                               "stop_token_ids",
                               "ignore_eos",
                               "no_stop_trim",
                               "skip_special_tokens",
                               "spaces_between_special_tokens",
                               "sampling_seed",
                               "n",
                               "custom_params",
                               "stream_interval",
                               "frequency_penalty",
                               "presence_penalty",
                               "repetition_penalty",
                               "json_schema",
                               "regex",
                               "ebnf",
                               "structural_tag",
                               "logit_bias",
                               "stop_regex"}));
  HART_RETURN_IF_ERROR(f.unsupported("frequency_penalty", "a frequency penalty"));
  HART_RETURN_IF_ERROR(f.unsupported("presence_penalty", "a presence penalty"));
  HART_RETURN_IF_ERROR(f.unsupported("json_schema", "constrained decoding"));
  HART_RETURN_IF_ERROR(f.unsupported("regex", "constrained decoding"));
  HART_RETURN_IF_ERROR(f.unsupported("ebnf", "constrained decoding"));
  HART_RETURN_IF_ERROR(f.unsupported("structural_tag", "constrained decoding"));
  HART_RETURN_IF_ERROR(f.unsupported("logit_bias", "logit_bias"));
  HART_RETURN_IF_ERROR(f.unsupported("stop_regex", "stop_regex"));
  HART_RETURN_IF_ERROR(f.unsupported("repetition_penalty", "a repetition penalty", 1.0f));
  protocol::sampling_options& s = r->g.sampling;
  int64_t v = k_default_max_new_tokens;
  HART_RETURN_IF_ERROR(f.get_int("max_new_tokens", 0, UINT32_MAX, &v));
  s.max_new_tokens = uint32_t(v);  // 0: the prompt scored only (needs return_logprob and logprob_start_len)
  v = 0;
  HART_RETURN_IF_ERROR(f.get_int("min_new_tokens", 0, UINT32_MAX, &v));
  s.min_new_tokens = uint32_t(v);
  HART_RETURN_IF_ERROR(f.get("temperature", &s.temperature));
  HART_RETURN_IF_ERROR(f.get("top_p", &s.top_p));
  v = -1;
  HART_RETURN_IF_ERROR(f.get_int("top_k", -1, INT32_MAX, &v));
  s.top_k = v == 0 ? -1 : int32_t(v);
  HART_RETURN_IF_ERROR(f.get("min_p", &s.min_p));
  HART_RETURN_IF_ERROR(f.get_strings("stop", &s.stop));
  HART_RETURN_IF_ERROR(f.get_token_ids("stop_token_ids", &s.stop_token_ids));
  HART_RETURN_IF_ERROR(f.get("ignore_eos", &s.ignore_eos));
  HART_RETURN_IF_ERROR(f.get("no_stop_trim", &r->no_stop_trim));
  // Text never holds special tokens, whatever these say (docs/http.md); both are accepted
  // because RL stacks send them on every request.
  bool ignored = false;
  HART_RETURN_IF_ERROR(f.get("skip_special_tokens", &ignored));
  HART_RETURN_IF_ERROR(f.get("spaces_between_special_tokens", &ignored));
  if (f.has("sampling_seed")) {
    int64_t seed = 0;
    HART_RETURN_IF_ERROR(f.get_int("sampling_seed", INT64_MIN, INT64_MAX, &seed));
    s.has_seed = true;
    s.seed = uint64_t(seed);
  }
  v = 1;
  HART_RETURN_IF_ERROR(f.get_int("n", 1, protocol::max_samples, &v));
  s.n = uint32_t(v);
  const json* ignored_object = nullptr;  // slime's custom_params (return_top_p_token_ids): not computed
  HART_RETURN_IF_ERROR(f.get_object("custom_params", &ignored_object));
  v = 1;
  HART_RETURN_IF_ERROR(f.get_int("stream_interval", 1, INT32_MAX, &v));
  r->stream_interval = uint32_t(v);
  return {};
}

// SGLang: "Must be in [0, prompt_tokens]".
status check_routed_experts_start(const sglang_request& r) {
  if (r.g.kind == protocol::prompt_kind::token_ids && r.routed_experts_start > r.g.token_ids.size())
    return invalid_argument("routed_experts_start_len: %u is past the prompt's %zu tokens",
                            r.routed_experts_start, r.g.token_ids.size());
  return {};
}

// SGLang's FINISH_ABORT: {type: abort, message, status_code, err_type}.
json abort_reason(const std::string& message, json status_code) {
  return {{"type", "abort"},
          {"message", message},
          {"status_code", std::move(status_code)},
          {"err_type", nullptr}};
}

std::string base64(const std::string& bytes) {
  static constexpr char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (n > 1) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (n > 2) v |= uint32_t(uint8_t(bytes[i + 2]));
    out += k_alphabet[v >> 18 & 63];
    out += k_alphabet[v >> 12 & 63];
    out += n > 1 ? k_alphabet[v >> 6 & 63] : '=';
    out += n > 2 ? k_alphabet[v & 63] : '=';
  }
  return out;
}

json logprob_entry(const sglang_request& r, const sglang_context& ctx, float lp, uint32_t id) {
  json text = nullptr;
  if (r.return_text_in_logprobs && ctx.tok) text = std::string(ctx.tok->token_bytes(int32_t(id)));
  return json::array({lp, id, text});
}

// The prompt's log-probs from logprob_start_len (with the final: [logprob, token_id, text]), the
// first prompt token's logprob null, as SGLang's; [] with logprob_start_len -1.
json input_logprobs(const sglang_request& r, const sample_output& s, const sglang_context& ctx) {
  json out = json::array();
  if (r.g.logprob_start < 0 || !s.finished || r.g.kind != protocol::prompt_kind::token_ids) return out;
  for (size_t k = 0; k < s.final.input_logprobs.size(); ++k) {
    const size_t pos = size_t(r.g.logprob_start) + k;
    if (pos >= r.g.token_ids.size()) break;
    const float lp = s.final.input_logprobs[k];
    json e = logprob_entry(r, ctx, lp, r.g.token_ids[pos]);
    if (std::isnan(lp)) e[0] = nullptr;
    out.push_back(std::move(e));
  }
  return out;
}

// SGLang's finish_reason object: {type: stop, matched: id | string}, {type: length, length},
// {type: abort, message}; null while the sample runs.
json finish_reason(const sglang_request& r, const generation& gen, size_t i, const sglang_context& ctx) {
  const sample_output& s = gen.sample(i);
  if (!s.finished) return nullptr;
  switch (s.final.reason) {
    case protocol::finish_reason::length:
      return {{"type", "length"}, {"length", s.final.usage.completion_tokens}};
    case protocol::finish_reason::abort:
      return abort_reason(s.final.error_message, nullptr);
    case protocol::finish_reason::error:
      return abort_reason(s.final.error_message,
                          http_status_of(status_from_text(s.final.error_message).code()));
    case protocol::finish_reason::stop:
      break;
  }
  json out = {{"type", "stop"}, {"matched", nullptr}};
  const size_t n = s.token_ids.size();
  if (n > 0 && gen.is_stop_token(s.token_ids.back(), n - 1)) {
    out["matched"] = s.token_ids.back();
  } else if (ctx.tok && !r.g.sampling.stop.empty()) {
    // The stop string begins right after the released text (sched/stop_rules.h).
    std::vector<int32_t> ids(s.token_ids.begin(), s.token_ids.end());
    status_or<std::string> all = ctx.tok->decode(ids, /*skip_special=*/true);
    if (all.ok() && all->compare(0, s.text.size(), s.text) == 0) {
      for (const std::string& stop : r.g.sampling.stop) {
        if (all->compare(s.text.size(), stop.size(), stop) == 0) out["matched"] = stop;
      }
    }
  }
  return out;
}

}  // namespace

status_or<sglang_request> parse_generate_request(const json& body) {
  sglang_request r;
  protocol::generate_request& g = r.g;
  json_fields f(body);
  HART_RETURN_IF_ERROR(f.only({"text",
                               "input_ids",
                               "sampling_params",
                               "return_logprob",
                               "logprob_start_len",
                               "top_logprobs_num",
                               "token_ids_logprob",
                               "return_text_in_logprobs",
                               "stream",
                               "rid",
                               "return_routed_experts",
                               "routed_experts_start_len",
                               "return_indexer_topk",
                               "image_data",
                               "video_data",
                               "audio_data",
                               "input_embeds",
                               "lora_path",
                               "session_params",
                               "custom_logit_processor",
                               "return_hidden_states",
                               "priority",
                               "log_metrics",
                               "modalities",
                               "bootstrap_host",
                               "bootstrap_port",
                               "bootstrap_room",
                               "data_parallel_rank",
                               "routed_dp_rank",
                               "extra_key",
                               "cache_salt",
                               "return_prompt_token_ids",
                               "return_entropy"}));
  HART_RETURN_IF_ERROR(f.unsupported(
      "return_indexer_topk", "indexer top-k replay over HTTP (~43 KB per token: binary protocol only)"));
  HART_RETURN_IF_ERROR(f.unsupported("token_ids_logprob", "token_ids_logprob"));
  HART_RETURN_IF_ERROR(f.unsupported("image_data", "image input"));
  HART_RETURN_IF_ERROR(f.unsupported("video_data", "video input"));
  HART_RETURN_IF_ERROR(f.unsupported("audio_data", "audio input"));
  HART_RETURN_IF_ERROR(f.unsupported("input_embeds", "input_embeds"));
  HART_RETURN_IF_ERROR(f.unsupported("lora_path", "LoRA"));
  HART_RETURN_IF_ERROR(f.unsupported("session_params", "session_params"));
  HART_RETURN_IF_ERROR(f.unsupported("custom_logit_processor", "custom logit processors"));
  HART_RETURN_IF_ERROR(f.unsupported("return_hidden_states", "hidden states"));
  HART_RETURN_IF_ERROR(f.unsupported("return_prompt_token_ids", "return_prompt_token_ids"));
  HART_RETURN_IF_ERROR(f.unsupported("return_entropy", "return_entropy"));
  HART_RETURN_IF_ERROR(f.unsupported("bootstrap_host", "prefill/decode disaggregation"));
  HART_RETURN_IF_ERROR(f.unsupported("bootstrap_room", "prefill/decode disaggregation"));

  const bool has_text = f.has("text"), has_ids = f.has("input_ids");
  if (has_text == has_ids) return invalid_argument("text, input_ids: exactly one is required");
  const json& prompt = f.at(has_text ? "text" : "input_ids");
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_array() || prompt[0].is_string()))
    return invalid_argument("%s: %zu prompts in one request; batched /generate is not supported",
                            has_text ? "text" : "input_ids", prompt.size());
  if (has_text) {
    g.kind = protocol::prompt_kind::text;
    HART_RETURN_IF_ERROR(f.get("text", &g.text));
  } else {
    g.kind = protocol::prompt_kind::token_ids;
    HART_RETURN_IF_ERROR(f.get_token_ids("input_ids", &g.token_ids));
  }
  const json* sp = nullptr;
  HART_RETURN_IF_ERROR(f.get_object("sampling_params", &sp));
  const json empty = json::object();
  HART_RETURN_IF_ERROR(parse_sampling(sp ? *sp : empty, &r));

  HART_RETURN_IF_ERROR(f.get("return_logprob", &g.sampling.logprobs));
  int64_t v = -1;
  HART_RETURN_IF_ERROR(f.get_int("logprob_start_len", -1, INT64_MAX, &v));
  if (g.sampling.logprobs) g.logprob_start = v;  // SGLang returns log-probs only with return_logprob
  if (g.sampling.max_new_tokens == 0 && g.logprob_start < 0) {
    return invalid_argument(
        "sampling_params.max_new_tokens: 0 scores the prompt only: give return_logprob and logprob_start_len "
        ">= 0");
  }
  v = 0;
  HART_RETURN_IF_ERROR(f.get_int("top_logprobs_num", 0, protocol::max_top_logprobs, &v));
  g.sampling.top_logprobs = g.sampling.logprobs ? uint8_t(v) : 0;
  HART_RETURN_IF_ERROR(f.get("return_text_in_logprobs", &r.return_text_in_logprobs));
  HART_RETURN_IF_ERROR(f.get("stream", &r.stream));
  HART_RETURN_IF_ERROR(f.get("rid", &r.rid));
  v = 0;
  HART_RETURN_IF_ERROR(f.get_int("priority", INT32_MIN, INT32_MAX, &v));
  g.priority = int32_t(v);
  HART_RETURN_IF_ERROR(f.get("return_routed_experts", &r.return_routed_experts));
  g.return_routing = r.return_routed_experts;
  v = 0;
  HART_RETURN_IF_ERROR(f.get_int("routed_experts_start_len", 0, UINT32_MAX, &v));
  r.routed_experts_start = uint32_t(v);
  HART_RETURN_IF_ERROR(check_routed_experts_start(r));

  g.request_id = 1;  // validate_generate wants one; the exchange sets its own
  HART_RETURN_IF_ERROR(protocol::validate_generate(g));
  return r;
}

status tokenize_prompt(const tokenizer* tok, sglang_request* r) {
  protocol::generate_request& g = r->g;
  if (g.kind != protocol::prompt_kind::text || !tok) return {};
  // As the gateway tokenizes text (actors/request_convert.cpp): the same ids, the same generation.
  HART_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->encode(g.text));
  if (tok->config().add_bos_token && tok->config().bos_id) ids.insert(ids.begin(), *tok->config().bos_id);
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(ids.begin(), ids.end());
  g.text.clear();
  HART_RETURN_IF_ERROR(protocol::validate_generate(g));
  return check_routed_experts_start(*r);
}

std::string routed_experts_base64(const protocol::routing_info& routing, uint32_t start) {
  std::vector<const protocol::layer_routing*> layers;
  size_t ids_per_position = 0;
  for (const protocol::layer_routing& l : routing.experts) {
    layers.push_back(&l);
    ids_per_position += l.k;
  }
  std::sort(layers.begin(), layers.end(), [](const auto* a, const auto* b) { return a->layer < b->layer; });
  std::string bytes;
  bytes.reserve(size_t(routing.positions > start ? routing.positions - start : 0) * ids_per_position * 4);
  for (uint32_t p = start; p < routing.positions; ++p) {
    for (const protocol::layer_routing* l : layers) {
      for (uint32_t j = 0; j < l->k; ++j) {
        const uint32_t id = uint32_t(l->ids[size_t(p) * l->k + j]);
        for (int shift = 0; shift < 32; shift += 8) bytes += char(id >> shift & 0xff);  // little-endian
      }
    }
  }
  return base64(bytes);
}

json sglang_sample(const sglang_request& r, const generation& gen, size_t i, const sglang_context& ctx) {
  const sample_output& s = gen.sample(i);
  const size_t n = gen.n_tokens(i, /*trim=*/!r.no_stop_trim);
  json meta = {
      {"id", ctx.rid},
      {"finish_reason", finish_reason(r, gen, i, ctx)},
      {"prompt_tokens", s.finished || r.g.kind != protocol::prompt_kind::token_ids
                            ? s.final.usage.prompt_tokens
                            : uint32_t(r.g.token_ids.size())},
      {"completion_tokens", s.finished ? s.final.usage.completion_tokens : uint32_t(s.token_ids.size())},
      {"cached_tokens", s.final.usage.cached_tokens},
      {"cached_tokens_details", {{"device", s.final.usage.cached_tokens}, {"host", 0}}},
      {"weight_version", std::to_string(gen.weight_version())},
      {"e2e_latency", double(s.final.timings.total_us) * 1e-6}};
  if (r.g.sampling.logprobs) {
    json out = json::array(), top = json::array();
    for (size_t k = 0; k < n && k < s.logprobs.size(); ++k) {
      out.push_back(logprob_entry(r, ctx, s.logprobs[k], s.token_ids[k]));
      if (r.g.sampling.top_logprobs > 0) {
        json t = json::array();
        if (k < s.top_logprobs.size()) {
          for (const protocol::token_logprob& e : s.top_logprobs[k])
            t.push_back(logprob_entry(r, ctx, e.logprob, e.token_id));
        }
        top.push_back(std::move(t));
      }
    }
    meta["output_token_logprobs"] = std::move(out);
    meta["input_token_logprobs"] = input_logprobs(r, s, ctx);
    if (r.g.sampling.top_logprobs > 0) meta["output_top_logprobs"] = std::move(top);
  }
  // With the final only, as SGLang's (the routing comes with it).
  if (r.return_routed_experts && s.finished) {
    meta["routed_experts"] = routed_experts_base64(s.final.routing, r.routed_experts_start);
    meta["routed_experts_start_len"] = r.routed_experts_start;
  }
  json ids = std::vector<uint32_t>(s.token_ids.begin(), s.token_ids.begin() + std::ptrdiff_t(n));
  return {{"text", s.text}, {"output_ids", std::move(ids)}, {"meta_info", std::move(meta)}};
}

json sglang_response(const sglang_request& r, const generation& gen, const sglang_context& ctx) {
  if (gen.size() == 1) return sglang_sample(r, gen, 0, ctx);
  json all = json::array();
  for (size_t i = 0; i < gen.size(); ++i) {
    json one = sglang_sample(r, gen, i, ctx);
    one["index"] = i;
    all.push_back(std::move(one));
  }
  return all;
}

std::string sglang_stream_event(const sglang_request& r, const generation& gen, int sample,
                                const protocol::reply& reply, const sglang_context& ctx) {
  if (sample < 0) return {};
  const sample_output& s = gen.sample(size_t(sample));
  if (const auto* c = std::get_if<protocol::chunk_event>(&reply)) {
    const size_t to = s.token_ids.size(), from = to - c->token_ids.size();
    if (!r.no_stop_trim && c->token_ids.size() == 1 && gen.is_stop_token(c->token_ids[0], from)) return {};
    // Tokens 1, 1 + interval, 1 + 2 interval, ... (from 1) open an event: did (from, to] get one?
    const size_t k = r.stream_interval;
    if ((to + k - 1) / k == (from + k - 1) / k) return {};
  }
  json one = sglang_sample(r, gen, size_t(sample), ctx);
  if (gen.size() > 1) one["index"] = sample;
  return sse_event(one);
}

}  // namespace hart::http
