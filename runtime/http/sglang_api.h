// File: runtime/http/sglang_api.h
// SGLang's native POST /generate as the RL stacks send it (shared/docs/field-notes.md
// §3.3-3.4; docs/http.md): the body to a protocol::generate_request (validated by validate.h)
// and a generation back to `{text, output_ids, meta_info}`, whole or as cumulative
// server-sent events. Pure functions, like openai_api.h.
//
//   HART_ASSIGN_OR_RETURN(sglang_request r, parse_generate_request(body));
//   HART_RETURN_IF_ERROR(tokenize_prompt(tok, &r));
//   json answer = sglang_response(r, gen, ctx);   // an object, or a list for n > 1
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/generation.h"
#include "runtime/http/json_fields.h"
#include "runtime/protocol/messages.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <string>

namespace hart::http {

struct sglang_request {
  protocol::generate_request g;
  std::string rid;  ///< the client's request id; "" = none (the server names it)
  bool stream = false;
  bool no_stop_trim = false;             ///< keep the stop token in output_ids and the log-probs
  bool return_text_in_logprobs = false;  ///< a token's text as the third logprob element
  /// A stream's event every stream_interval tokens (the first token's, then every interval-th
  /// after it, as SGLang's scheduler sends them) and the final's.
  uint32_t stream_interval = 1;
  /// meta_info.routed_experts of positions [routed_experts_start, the last computed one] in the
  /// final answer (g.return_routing).
  bool return_routed_experts = false;
  uint32_t routed_experts_start = 0;
};

/// invalid_argument naming the field for an unknown field, a wrong type, a bad value or a
/// feature hart does not implement over HTTP.
status_or<sglang_request> parse_generate_request(const json& body);

/// A text prompt to its token ids as the gateway would tokenize it (the tokenizer's encoding,
/// with BOS when its config asks), so its length shows in every chunk's prompt_tokens; then
/// routed_experts_start_len must be within the prompt (invalid_argument otherwise, as SGLang).
/// Without a tokenizer a text prompt stays text (the gateway refuses it).
status tokenize_prompt(const tokenizer* tok, sglang_request* r);

/// meta_info.routed_experts as SGLang writes it: base64 of little-endian int32
/// [positions - start, MoE layers in layer order, k], the experts of positions
/// [start, routing.positions) ("" when start is past them). Every layer has the same k
/// (generation checks).
std::string routed_experts_base64(const protocol::routing_info& routing, uint32_t start);

struct sglang_context {
  std::string rid;  ///< the request's, or the server's name for it
  const tokenizer* tok =
      nullptr;  ///< token texts (return_text_in_logprobs), stop-string matches; may be null
};

/// One sample's `{text, output_ids, meta_info}`, as far as it has come (finish_reason null
/// until its final).
json sglang_sample(const sglang_request& r, const generation& gen, size_t sample, const sglang_context& ctx);
/// The whole answer: one object for n = 1, a list of n objects otherwise.
json sglang_response(const sglang_request& r, const generation& gen, const sglang_context& ctx);
/// The cumulative event for `sample` after `reply` was applied; "" when nothing shows (the
/// stop token, trimmed; a token between two stream_interval events). With n > 1 each object
/// carries its "index".
std::string sglang_stream_event(const sglang_request& r, const generation& gen, int sample,
                                const protocol::reply& reply, const sglang_context& ctx);

}  // namespace hart::http
