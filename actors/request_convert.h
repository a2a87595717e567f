// File: actors/request_convert.h
// Between the wire (runtime/protocol) and the scheduler (runtime/sched):
// prompts become token ids (chat messages through the DeepSeek template, text
// with BOS when the tokenizer asks for it), events become chunk/final replies.
// Pure functions: the gateway actor calls them, tests call them directly.
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"
#include "runtime/sched/request.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>

namespace hart::actors {

/// The scheduler request for `g` with internal id `id`, checked by
/// gen_request::validate (vocab_size, max_context: the scheduler's, 0 = none) so
/// that the scheduler accepts it; a failure's message names the client's id.
/// `tok` may be null (then only token-id prompts are accepted).
status_or<sched::gen_request> to_gen_request(const protocol::generate_request& g, uint64_t id,
                                             const tokenizer* tok, int64_t vocab_size, int64_t max_context);

protocol::finish_reason to_wire(sched::finish_reason r);

/// A one-token chunk for `e`; `client_request_id` and `seq` are the client's view.
protocol::chunk_event to_chunk(const sched::token_event& e, uint64_t client_request_id, uint32_t seq,
                               bool logprobs, bool top_logprobs);
/// The final for `e`. Its routing (when asked for) goes inline when it holds at
/// most max_routing_ids ids, else into `parts` (routing_part replies to send
/// before the final, docs/protocol.md §5.3) and final_event::routing_parts.
protocol::final_event to_final(const sched::finish_event& e, uint64_t client_request_id,
                               int64_t max_routing_ids, std::vector<protocol::routing_part>* parts);

}  // namespace hart::actors
