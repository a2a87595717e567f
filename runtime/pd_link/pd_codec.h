// File: runtime/pd_link/pd_codec.h
// pd_message (pd_messages.h) to and from one frame of pd.capnp. No header frame:
// the union says what a frame is, PdMessage.version guards mismatched builds.
//
// Decoding reads the frame through protocol/capnp_frame.h as every wire does
// (size, alignment, traversal and nesting limits, trailing bytes; never
// throws) and checks every field: a wrong version, a zero request or transfer
// id, an empty or over-long prompt, a negative token, sampling outside
// validate_sampling, a kv_chunk whose header or sizes do not hold together
// (its page range outside the sequence, bytes not whole floats or not whole
// pages), an unknown refuse reason, an over-long message or an unknown kind.
// Failures are invalid_argument naming the message ("kv_chunk: ..."),
// resource_exhausted when out of memory. Whether a chunk fits the receiver's
// page layout is kv_pages_import's to say.
//
//   HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, pd_link::encode(pd_message{rid, tid, kv_done{...}}));
//   status_or<pd_message> m = pd_link::decode(data, size);
//   if (auto* c = std::get_if<pd_link::kv_chunk>(&m->body)) ...
#pragma once

#include "runtime/core/status.h"
#include "runtime/pd_link/pd_messages.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hart::pd_link {

/// Encodes without judging the fields (tests craft bad input); invalid_argument
/// only for a value the wire cannot carry (a count outside UInt32) or a
/// message Cap'n Proto cannot represent.
status_or<std::vector<uint8_t>> encode(const pd_message& m);
/// `data` need not be aligned and must stay valid only during the call.
status_or<pd_message> decode(const void* data, size_t size);

}  // namespace hart::pd_link
