// File: runtime/http/openai_api.h
// OpenAI's API as hart speaks it (docs/http.md): POST /v1/chat/completions and
// /v1/completions bodies to a protocol::generate_request (validated by validate.h, the same
// checks a ZeroMQ request gets), and a generation back to OpenAI's response objects, whole
// or as server-sent events. Pure functions: the HTTP routes call them, tests too.
//
//   HART_ASSIGN_OR_RETURN(openai_request r, parse_openai_request(body, /*chat=*/true, "tiny-a"));
//   ...                                        // r.g to the gateway; replies into `gen`
//   json answer = openai_response(r, gen, ctx);
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/generation.h"
#include "runtime/http/json_fields.h"
#include "runtime/protocol/messages.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hart::http {

struct openai_request {
  protocol::generate_request g;  ///< request_id is the exchange's
  bool chat = true;              ///< /v1/chat/completions, else /v1/completions
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
};

/// The request in `body` (a JSON object). invalid_argument naming the field for a wrong type,
/// a bad value or an unsupported feature; not_found for a `model` other than `served_model`.
status_or<openai_request> parse_openai_request(const json& body, bool chat, const std::string& served_model);

/// What every response object repeats.
struct openai_context {
  std::string id;       ///< "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  ///< Unix seconds
  std::string model;
  const tokenizer* tok = nullptr;  ///< token texts of log-probs; may be null
};

/// The whole response (chat.completion / text_completion) for a finished generation.
json openai_response(const openai_request& r, const generation& gen, const openai_context& ctx);

/// The server-sent events of one stream, in order.
class openai_stream {
 public:
  openai_stream(const openai_request& r, const openai_context& ctx) : r_(r), ctx_(ctx) {}
  /// Events for `reply`, just applied to `gen` (sample `sample`); "" when it shows nothing
  /// (a token whose text is held back, unless log-probs were asked for).
  std::string on_reply(const generation& gen, int sample, const protocol::reply& reply);
  /// The usage chunk (include_usage) and `data: [DONE]`.
  std::string end(const generation& gen);

 private:
  json chunk(const generation& gen, json choices) const;
  const openai_request& r_;
  const openai_context& ctx_;
  std::vector<bool> started_;  // per sample: its first chunk (the role) was sent
};

/// "hart-w<weight version>": the weights of the latest reply, in every answer and stream chunk.
std::string system_fingerprint(const generation& gen);

/// usage {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens}}.
json openai_usage(const generation& gen);

/// One SSE event: "data: <json>\n\n".
std::string sse_event(const json& j);
/// The last event of every stream.
inline constexpr const char* k_sse_done = "data: [DONE]\n\n";

}  // namespace hart::http
