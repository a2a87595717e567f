#include "runtime/protocol/validate.h"

#include <cmath>
#include <type_traits>

namespace hart::protocol {

bool utf8_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

status validate_sampling(const sampling_options& s, bool scoring) {
  // Written as !(in range) so NaN fails every check.
  if (!(s.temperature >= 0.0f && s.temperature <= max_temperature))
    return invalid_argument("sampling.temperature: %g, must be in [0, %g]", s.temperature, max_temperature);
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    return invalid_argument("sampling.topP: %g, must be in (0, 1]", s.top_p);
  if (s.top_k != -1 && s.top_k < 1)
    return invalid_argument("sampling.topK: %d, must be -1 (off) or >= 1", s.top_k);
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f))
    return invalid_argument("sampling.minP: %g, must be in [0, 1]", s.min_p);
  if (s.max_new_tokens < 1 && !scoring) {
    return invalid_argument(
        "sampling.maxNewTokens: must be >= 1 (0 only to score a prompt: logprobStartLen >= 0)");
  }
  if (s.min_new_tokens > s.max_new_tokens)
    return invalid_argument("sampling.minNewTokens: %u > maxNewTokens %u", s.min_new_tokens,
                            s.max_new_tokens);
  if (s.stop.size() > max_stop_strings)
    return invalid_argument("sampling.stop: %zu strings, limit %zu", s.stop.size(), max_stop_strings);
  for (size_t i = 0; i < s.stop.size(); ++i) {
    if (s.stop[i].empty() || s.stop[i].size() > max_stop_string_bytes)
      return invalid_argument("sampling.stop[%zu]: %zu bytes, must be 1..%zu", i, s.stop[i].size(),
                              max_stop_string_bytes);
    if (!utf8_valid(s.stop[i])) return invalid_argument("sampling.stop[%zu]: not UTF-8", i);
  }
  if (s.stop_token_ids.size() > max_stop_token_ids)
    return invalid_argument("sampling.stopTokenIds: %zu ids, limit %zu", s.stop_token_ids.size(),
                            max_stop_token_ids);
  if (s.n < 1 || s.n > max_samples)
    return invalid_argument("sampling.n: %u, must be in [1, %u]", s.n, max_samples);
  if (s.top_logprobs > max_top_logprobs)
    return invalid_argument("sampling.topLogprobs: %u, limit %u", unsigned{s.top_logprobs},
                            unsigned{max_top_logprobs});
  return {};
}

status validate_generate(const generate_request& g) {
  if (g.request_id == 0) return invalid_argument("generate.requestId: must be != 0");
  switch (g.kind) {
    case prompt_kind::token_ids:
      if (g.token_ids.empty()) return invalid_argument("prompt.tokenIds: empty prompt");
      if (g.token_ids.size() > max_prompt_tokens)
        return invalid_argument("prompt.tokenIds: %zu tokens, limit %zu", g.token_ids.size(),
                                max_prompt_tokens);
      break;
    case prompt_kind::messages: {
      if (g.messages.empty()) return invalid_argument("prompt.messages: empty prompt");
      if (g.messages.size() > max_chat_messages)
        return invalid_argument("prompt.messages: %zu messages, limit %zu", g.messages.size(),
                                max_chat_messages);
      size_t total = 0;
      for (size_t i = 0; i < g.messages.size(); ++i) {
        const auto& m = g.messages[i];
        if (m.role.empty() || m.role.size() > max_role_bytes || !utf8_valid(m.role))
          return invalid_argument("prompt.messages[%zu].role: must be 1..%zu bytes of UTF-8", i,
                                  max_role_bytes);
        if (!utf8_valid(m.content)) return invalid_argument("prompt.messages[%zu].content: not UTF-8", i);
        if (!utf8_valid(m.reasoning)) return invalid_argument("prompt.messages[%zu].reasoning: not UTF-8", i);
        total += m.content.size() + m.reasoning.size();
      }
      if (total > max_prompt_text_bytes)
        return invalid_argument("prompt.messages: %zu content bytes, limit %zu", total,
                                max_prompt_text_bytes);
      break;
    }
    case prompt_kind::text:
      if (g.text.empty()) return invalid_argument("prompt.text: empty prompt");
      if (g.text.size() > max_prompt_text_bytes)
        return invalid_argument("prompt.text: %zu bytes, limit %zu", g.text.size(), max_prompt_text_bytes);
      if (!utf8_valid(g.text)) return invalid_argument("prompt.text: not UTF-8");
      break;
    default:
      return invalid_argument("prompt: unknown kind %u", static_cast<unsigned>(g.kind));
  }
  if (g.session_id.size() > max_session_id_bytes || !utf8_valid(g.session_id))
    return invalid_argument("sessionId: must be at most %zu bytes of UTF-8", max_session_id_bytes);
  if (g.logprob_start < -1)
    return invalid_argument("logprobStartLen: %lld, must be >= -1", (long long)g.logprob_start);
  return validate_sampling(g.sampling, g.logprob_start >= 0);
}

status validate_request(const request& r) {
  if (const auto* g = std::get_if<generate_request>(&r)) return validate_generate(*g);
  const auto& c = std::get<control_request>(r);
  if (c.verb > control_verb::weight_version)
    return invalid_argument("control: unknown verb %u", static_cast<unsigned>(c.verb));
  if (c.verb == control_verb::abort && !c.all && c.request_id == 0)
    return invalid_argument("abort.requestId: must be != 0 (or use all)");
  if (c.verb == control_verb::pause && c.mode > pause_mode::in_place)
    return invalid_argument("pause.mode: unknown value %u", static_cast<unsigned>(c.mode));
  return {};
}

status validate_reply(const reply& r) {
  if (const auto* c = std::get_if<chunk_event>(&r)) {
    if (!c->logprobs.empty() && c->logprobs.size() != c->token_ids.size())
      return invalid_argument("chunk.logprobs: %zu values for %zu tokens", c->logprobs.size(),
                              c->token_ids.size());
    if (!c->top_logprobs.empty() && c->top_logprobs.size() != c->token_ids.size())
      return invalid_argument("chunk.topLogprobs: %zu lists for %zu tokens", c->top_logprobs.size(),
                              c->token_ids.size());
    if (!utf8_valid(c->text)) return invalid_argument("chunk.text: not UTF-8");
  }
  if (const auto* a = std::get_if<ack_reply>(&r)) {
    if (a->verb > control_verb::flush_cache)
      return invalid_argument("ack.verb: %u is not an acknowledged verb", static_cast<unsigned>(a->verb));
  }
  return {};
}

}  // namespace hart::protocol
