#include "runtime/http/openai_api.h"

#include "runtime/protocol/validate.h"

#include <algorithm>

namespace hart::http {
namespace {

// Without max_tokens a chat answer may run to the end of the context (OpenAI's "inf"); the
// scheduler ends it at max_context.
constexpr uint32_t k_chat_default_max_tokens = UINT32_MAX;
// OpenAI's default for the legacy completions endpoint.
constexpr uint32_t k_completions_default_max_tokens = 16;

status parse_content(const json& content, const std::string& field, std::string* out) {
  if (content.is_null()) return {};
  if (content.is_string()) {
    *out = content.get<std::string>();
    return {};
  }
  if (!content.is_array())
    return invalid_argument("%s: expected a string or a list of parts, got %s", field.c_str(),
                            content.type_name());
  for (size_t i = 0; i < content.size(); ++i) {
    const json& p = content[i];
    const std::string name = field + "[" + std::to_string(i) + "]";
    if (!p.is_object())
      return invalid_argument("%s: expected an object, got %s", name.c_str(), p.type_name());
    json_fields f(p, name + ".");
    std::string type, text;
    HART_RETURN_IF_ERROR(f.get("type", &type));
    if (type != "text")
      return invalid_argument("%s.type: '%s' parts are not supported (text only)", name.c_str(),
                              type.c_str());
    HART_RETURN_IF_ERROR(f.get("text", &text));
    *out += text;
  }
  return {};
}

status parse_messages(const json_fields& f, std::vector<protocol::chat_message>* out) {
  if (!f.has("messages")) return invalid_argument("messages: required");
  const json& msgs = f.at("messages");
  if (!msgs.is_array()) return invalid_argument("messages: expected a list, got %s", msgs.type_name());
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!msgs[i].is_object())
      return invalid_argument("%s: expected an object, got %s", name.c_str(), msgs[i].type_name());
    json_fields m(msgs[i], name + ".");
    protocol::chat_message cm;
    HART_RETURN_IF_ERROR(m.get("role", &cm.role));
    if (cm.role.empty()) return invalid_argument("%s.role: required", name.c_str());
    // OpenAI's developer messages are the system prompt of newer models.
    if (cm.role == "developer") cm.role = "system";
    HART_RETURN_IF_ERROR(m.unsupported("tool_calls", "tool calling"));
    HART_RETURN_IF_ERROR(m.unsupported("function_call", "function calling"));
    if (m.has("content"))
      HART_RETURN_IF_ERROR(parse_content(m.at("content"), name + ".content", &cm.content));
    // An assistant turn's thinking: SGLang's and DeepSeek's reasoning_content, vLLM's reasoning.
    // DeepSeek-V4's template keeps it only after the last user turn in thinking mode.
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (m.has(key)) HART_RETURN_IF_ERROR(parse_content(m.at(key), name + "." + key, &cm.reasoning));
    }
    out->push_back(std::move(cm));
  }
  return {};
}

// reasoning_effort as the clients send it: DeepSeek-V4's encoding renders only "max" apart;
// "none" turns thinking off (vLLM's V4 mapping).
status parse_effort(const json_fields& f, const char* key, protocol::generate_request* g, bool* off) {
  std::string e;
  HART_RETURN_IF_ERROR(f.get(key, &e));
  if (e.empty()) return {};
  if (e == "max") {
    g->effort = protocol::reasoning_effort::max;
  } else if (e == "high") {
    g->effort = protocol::reasoning_effort::high;
  } else if (e == "none") {
    *off = true;
  } else if (e != "low" && e != "minimal" && e != "medium") {
    return invalid_argument("%s: '%s', expected none, minimal, low, medium, high or max", f.name(key).c_str(),
                            e.c_str());
  }
  return {};
}

// DeepSeek-V4's thinking mode: chat_template_kwargs {thinking | enable_thinking, reasoning_effort}
// (SGLang, vLLM), DeepSeek's API `thinking: {"type": "enabled"}`, and `reasoning_effort`.
status parse_thinking(const json_fields& f, protocol::generate_request* g) {
  bool off = false;
  if (f.has("chat_template_kwargs")) {
    const json* kw = nullptr;
    HART_RETURN_IF_ERROR(f.get_object("chat_template_kwargs", &kw));
    json_fields k(*kw, "chat_template_kwargs.");
    HART_RETURN_IF_ERROR(k.only({"thinking", "enable_thinking", "reasoning_effort"}));
    bool on = false;
    HART_RETURN_IF_ERROR(k.get("thinking", &on));
    g->thinking = on;
    HART_RETURN_IF_ERROR(k.get("enable_thinking", &on));
    g->thinking = g->thinking || on;
    HART_RETURN_IF_ERROR(parse_effort(k, "reasoning_effort", g, &off));
  }
  if (f.has("thinking")) {
    const json* t = nullptr;
    HART_RETURN_IF_ERROR(f.get_object("thinking", &t));
    json_fields tf(*t, "thinking.");
    std::string type;
    HART_RETURN_IF_ERROR(tf.get("type", &type));
    if (type != "enabled" && type != "disabled")
      return invalid_argument("thinking.type: '%s', expected enabled or disabled", type.c_str());
    g->thinking = type == "enabled";
  }
  HART_RETURN_IF_ERROR(parse_effort(f, "reasoning_effort", g, &off));
  if (off) g->thinking = false;
  return {};
}

// /v1/completions' prompt: a string or token ids, or a list holding one of them.
status parse_prompt(const json_fields& f, protocol::generate_request* g) {
  if (!f.has("prompt")) return invalid_argument("prompt: required");
  const json* p = &f.at("prompt");
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    p = &(*p)[0];
  else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array()))
    return invalid_argument("prompt: %zu prompts in one request; batched completions are not supported",
                            p->size());
  if (p->is_string()) {
    g->kind = protocol::prompt_kind::text;
    g->text = p->get<std::string>();
    return {};
  }
  g->kind = protocol::prompt_kind::token_ids;
  json holder = {{"prompt", *p}};
  return json_fields(holder).get_token_ids("prompt", &g->token_ids);
}

json token_entry(const tokenizer* tok, uint32_t id, float logprob) {
  const std::string text = tok ? std::string(tok->token_bytes(int32_t(id))) : std::string();
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

// chat: logprobs.content entries for tokens [from, to) of sample s.
json chat_logprobs(const sample_output& s, size_t from, size_t to, const tokenizer* tok) {
  json content = json::array();
  for (size_t k = from; k < to && k < s.logprobs.size(); ++k) {
    json e = token_entry(tok, s.token_ids[k], s.logprobs[k]);
    json top = json::array();
    if (k < s.top_logprobs.size()) {
      for (const protocol::token_logprob& t : s.top_logprobs[k])
        top.push_back(token_entry(tok, t.token_id, t.logprob));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

// completions: the legacy {tokens, token_logprobs, top_logprobs, text_offset} for [from, to).
json completion_logprobs(const sample_output& s, size_t from, size_t to, size_t text_offset,
                         const tokenizer* tok) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t k = from; k < to && k < s.logprobs.size(); ++k) {
    const std::string t = tok ? std::string(tok->token_bytes(int32_t(s.token_ids[k]))) : std::string();
    tokens.push_back(t);
    lps.push_back(s.logprobs[k]);
    json top = json::object();
    if (k < s.top_logprobs.size()) {
      for (const protocol::token_logprob& e : s.top_logprobs[k]) {
        top[tok ? std::string(tok->token_bytes(int32_t(e.token_id))) : std::to_string(e.token_id)] =
            e.logprob;
      }
    }
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace

status_or<openai_request> parse_openai_request(const json& body, bool chat, const std::string& served_model) {
  openai_request r;
  r.chat = chat;
  protocol::generate_request& g = r.g;
  protocol::sampling_options& s = g.sampling;
  json_fields f(body);
  std::string model;
  HART_RETURN_IF_ERROR(f.get("model", &model));
  if (!model.empty() && model != served_model)
    return not_found("model: '%s' is not served here (this server serves '%s')", model.c_str(),
                     served_model.c_str());

  if (chat) {
    g.kind = protocol::prompt_kind::messages;
    HART_RETURN_IF_ERROR(parse_messages(f, &g.messages));
  } else {
    HART_RETURN_IF_ERROR(parse_prompt(f, &g));
  }
  // Features hart does not have are refused, not ignored.
  HART_RETURN_IF_ERROR(f.unsupported("tools", "tool calling"));
  HART_RETURN_IF_ERROR(f.unsupported("functions", "function calling"));
  HART_RETURN_IF_ERROR(f.unsupported("logit_bias", "logit_bias"));
  HART_RETURN_IF_ERROR(f.unsupported("frequency_penalty", "a frequency penalty"));
  HART_RETURN_IF_ERROR(f.unsupported("presence_penalty", "a presence penalty"));
  HART_RETURN_IF_ERROR(f.unsupported("echo", "echo"));
  HART_RETURN_IF_ERROR(f.unsupported("suffix", "suffix"));
  if (chat) HART_RETURN_IF_ERROR(parse_thinking(f, &g));
  HART_RETURN_IF_ERROR(f.unsupported("prompt_logprobs", "prompt_logprobs"));
  if (f.has("response_format")) {
    const json* rf = nullptr;
    HART_RETURN_IF_ERROR(f.get_object("response_format", &rf));
    std::string type;
    HART_RETURN_IF_ERROR(json_fields(*rf, "response_format.").get("type", &type));
    if (type != "text")
      return invalid_argument("response_format.type: '%s' is not supported (text only)", type.c_str());
  }
  HART_RETURN_IF_ERROR(f.unsupported("repetition_penalty", "a repetition penalty", 1.0f));
  int64_t best_of = 1;
  HART_RETURN_IF_ERROR(f.get_int("best_of", 1, 1, &best_of));

  int64_t max_tokens = chat ? k_chat_default_max_tokens : k_completions_default_max_tokens;
  HART_RETURN_IF_ERROR(f.get_int("max_tokens", 0, UINT32_MAX, &max_tokens));
  HART_RETURN_IF_ERROR(f.get_int("max_completion_tokens", 0, UINT32_MAX, &max_tokens));
  s.max_new_tokens = uint32_t(max_tokens);
  int64_t min_tokens = 0;
  HART_RETURN_IF_ERROR(f.get_int("min_tokens", 0, UINT32_MAX, &min_tokens));
  s.min_new_tokens = uint32_t(min_tokens);
  int64_t n = 1;
  HART_RETURN_IF_ERROR(f.get_int("n", 1, protocol::max_samples, &n));
  s.n = uint32_t(n);
  HART_RETURN_IF_ERROR(f.get_strings("stop", &s.stop));
  HART_RETURN_IF_ERROR(f.get("temperature", &s.temperature));
  HART_RETURN_IF_ERROR(f.get("top_p", &s.top_p));
  int64_t top_k = -1;
  HART_RETURN_IF_ERROR(f.get_int("top_k", -1, INT32_MAX, &top_k));
  s.top_k = top_k == 0 ? -1 : int32_t(top_k);  // 0 and -1 both mean off (vLLM, SGLang)
  HART_RETURN_IF_ERROR(f.get("min_p", &s.min_p));
  if (f.has("seed")) {
    int64_t seed = 0;
    HART_RETURN_IF_ERROR(f.get_int("seed", INT64_MIN, INT64_MAX, &seed));
    s.has_seed = true;
    s.seed = uint64_t(seed);
  }
  HART_RETURN_IF_ERROR(f.get("ignore_eos", &s.ignore_eos));
  HART_RETURN_IF_ERROR(f.get_token_ids("stop_token_ids", &s.stop_token_ids));
  bool skip_special = true;  // text never holds special tokens (docs/http.md)
  HART_RETURN_IF_ERROR(f.get("skip_special_tokens", &skip_special));

  if (chat) {
    HART_RETURN_IF_ERROR(f.get("logprobs", &s.logprobs));
    int64_t top = 0;
    HART_RETURN_IF_ERROR(f.get_int("top_logprobs", 0, protocol::max_top_logprobs, &top));
    if (top > 0 && !s.logprobs) return invalid_argument("top_logprobs: needs logprobs: true");
    s.top_logprobs = uint8_t(top);
  } else if (f.has("logprobs")) {
    int64_t top = 0;
    HART_RETURN_IF_ERROR(f.get_int("logprobs", 0, protocol::max_top_logprobs, &top));
    s.logprobs = true;
    s.top_logprobs = uint8_t(top);
  }
  HART_RETURN_IF_ERROR(f.get("stream", &r.stream));
  const json* so = nullptr;
  HART_RETURN_IF_ERROR(f.get_object("stream_options", &so));
  if (so) HART_RETURN_IF_ERROR(json_fields(*so, "stream_options.").get("include_usage", &r.include_usage));

  g.request_id = 1;  // validate_generate wants one; the exchange sets its own
  HART_RETURN_IF_ERROR(protocol::validate_generate(g));
  return r;
}

std::string system_fingerprint(const generation& gen) {
  return "hart-w" + std::to_string(gen.weight_version());
}

json openai_usage(const generation& gen) {
  const protocol::usage_info& u0 = gen.sample(0).final.usage;
  uint64_t completion = 0;
  for (size_t i = 0; i < gen.size(); ++i) completion += gen.sample(i).final.usage.completion_tokens;
  return {{"prompt_tokens", u0.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", u0.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", u0.cached_tokens}}}};
}

json openai_response(const openai_request& r, const generation& gen, const openai_context& ctx) {
  json choices = json::array();
  for (size_t i = 0; i < gen.size(); ++i) {
    const sample_output& s = gen.sample(i);
    const size_t n = gen.n_tokens(i, /*trim=*/true);
    json c = {{"index", i}, {"finish_reason", protocol::finish_reason_name(s.final.reason)}};
    if (r.chat) {
      c["message"] = {{"role", "assistant"}, {"content", s.text}};
      if (r.g.thinking) c["message"]["reasoning_content"] = s.reasoning;
      c["logprobs"] = r.g.sampling.logprobs ? chat_logprobs(s, 0, n, ctx.tok) : json(nullptr);
    } else {
      c["text"] = s.text;
      c["logprobs"] = r.g.sampling.logprobs ? completion_logprobs(s, 0, n, 0, ctx.tok) : json(nullptr);
    }
    choices.push_back(std::move(c));
  }
  return {{"id", ctx.id},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model},
          {"system_fingerprint", system_fingerprint(gen)},
          {"choices", std::move(choices)},
          {"usage", openai_usage(gen)}};
}

json openai_stream::chunk(const generation& gen, json choices) const {
  json c = {{"id", ctx_.id},
            {"object", r_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", ctx_.created},
            {"model", ctx_.model},
            {"system_fingerprint", system_fingerprint(gen)},
            {"choices", std::move(choices)}};
  if (r_.include_usage) c["usage"] = nullptr;
  return c;
}

std::string openai_stream::on_reply(const generation& gen, int sample, const protocol::reply& reply) {
  if (sample < 0) return {};
  std::string out;
  started_.resize(gen.size(), false);
  if (r_.chat && !started_[sample]) {
    started_[sample] = true;
    out += sse_event(chunk(gen, json::array({{{"index", sample},
                                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                                              {"logprobs", nullptr},
                                              {"finish_reason", nullptr}}})));
  }
  const sample_output& s = gen.sample(size_t(sample));
  // Reasoning that the final released (held back in case it began "</think>").
  if (r_.chat && std::holds_alternative<protocol::final_event>(reply) && !s.reasoning_delta.empty()) {
    out += sse_event(chunk(gen, json::array({{{"index", sample},
                                              {"delta", {{"reasoning_content", s.reasoning_delta}}},
                                              {"logprobs", nullptr},
                                              {"finish_reason", nullptr}}})));
  }
  if (const auto* c = std::get_if<protocol::chunk_event>(&reply)) {
    const size_t to = s.token_ids.size(), from = to - c->token_ids.size();
    const bool stop_token = c->token_ids.size() == 1 && gen.is_stop_token(c->token_ids[0], from);
    const bool lp = r_.g.sampling.logprobs && !stop_token;
    if (s.text_delta.empty() && s.reasoning_delta.empty() && !lp) return out;
    json choice = {{"index", sample}, {"finish_reason", nullptr}};
    if (r_.chat) {
      choice["delta"] = {{"content", s.text_delta}};
      if (!s.reasoning_delta.empty()) choice["delta"]["reasoning_content"] = s.reasoning_delta;
      choice["logprobs"] = lp ? chat_logprobs(s, from, to, ctx_.tok) : json(nullptr);
    } else {
      choice["text"] = c->text;
      choice["logprobs"] =
          lp ? completion_logprobs(s, from, to, s.text.size() - c->text.size(), ctx_.tok) : json(nullptr);
    }
    out += sse_event(chunk(gen, json::array({std::move(choice)})));
  } else if (std::holds_alternative<protocol::final_event>(reply)) {
    if (s.final.reason == protocol::finish_reason::error) {
      out += sse_event({{"error",
                         {{"message", s.final.error_message},
                          {"type", "server_error"},
                          {"param", nullptr},
                          {"code", "internal"}}}});
    }
    json choice = {{"index", sample},
                   {"logprobs", nullptr},
                   {"finish_reason", protocol::finish_reason_name(s.final.reason)}};
    if (r_.chat)
      choice["delta"] = json::object();
    else
      choice["text"] = "";
    out += sse_event(chunk(gen, json::array({std::move(choice)})));
  }
  return out;
}

std::string openai_stream::end(const generation& gen) {
  std::string out;
  if (r_.include_usage) {
    json c = chunk(gen, json::array());
    c["usage"] = openai_usage(gen);
    out += sse_event(c);
  }
  return out + k_sse_done;
}

std::string sse_event(const json& j) {
  return "data: " + json_text(j) + "\n\n";
}

}  // namespace hart::http
