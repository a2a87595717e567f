// File: runtime/protocol/codec.h
// Converts requests and replies (messages.h) to and from wire frames:
//   header  = 2 bytes [protocol_version, frame_kind]
//   payload = one Cap'n Proto message (standard unpacked framing), root Request or Reply.
// The routing-id frame of a ROUTER socket is the transport's business, not the codec's.
//
// Decoding never throws and never trusts its input: it rejects a wrong header, a payload
// over max_frame_bytes or not a multiple of 8 bytes, copies a misaligned payload into
// aligned words, reads with ReaderOptions{traversal_limit_words, nesting_limit}, turns any
// kj::Exception into a status, and validates every field (validate.h). All failures are
// invalid_argument with a message naming the problem. A request that fails once its root
// is readable still says whom the failure answers (request_ref), so the error reply can
// carry its request id or tag.
//
//   HART_ASSIGN_OR_RETURN(auto frames, protocol::encode_request(req));
//   zmq send frames.header, frames.payload ...
//   status_or<protocol::request> r = protocol::decode_request(hdr_view, payload_view);
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hart::protocol {

/// A read-only view of one received frame; the bytes need not be aligned.
struct byte_view {
  const void* data = nullptr;
  size_t size = 0;
};

/// The two frames of an encoded message. payload.size() is a multiple of 8.
struct encoded_frames {
  std::array<uint8_t, 2> header{};
  std::vector<uint8_t> payload;
};

/// The header bytes for a frame kind at the current protocol_version.
std::array<uint8_t, 2> frame_header(frame_kind kind);

/// Encodes without validating (a server may relay anything; tests craft bad input).
/// Fails only when Cap'n Proto cannot represent the message (e.g. a list over 2^29 items).
status_or<encoded_frames> encode_request(const request& r);
status_or<encoded_frames> encode_reply(const reply& r);

/// Whom an error about a request answers: what could be read of it before it failed.
struct request_ref {
  uint64_t tag = 0;         ///< Request.tag of a control verb (0 for a generate: docs/protocol.md §4)
  uint64_t request_id = 0;  ///< GenerateRequest.requestId; 0 when not a generate or not readable
};

/// Decodes and validates. The views must stay valid only for the duration of the call.
/// On failure `*ref` (when given) holds what could be read of the request, else zeros.
status_or<request> decode_request(byte_view header, byte_view payload, request_ref* ref = nullptr);
status_or<reply> decode_reply(byte_view header, byte_view payload);

}  // namespace hart::protocol
