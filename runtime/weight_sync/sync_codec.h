// File: runtime/weight_sync/sync_codec.h
// Weight-sync messages to and from frames (weight_sync.capnp): a 2-byte header
// [version 1, kind], one Cap'n Proto payload, and for a bucket one raw data
// frame per chunk. Decoding never throws: a bad header, a payload that is not
// one well-formed message, a field out of its limits, or data frames that do
// not match the chunk list are invalid_argument naming the problem.
//
//   HART_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, encode_request(bucket));
//   send [request_header()] [payload] [chunk 0 bytes] [chunk 1 bytes] ...
//   HART_ASSIGN_OR_RETURN(sync_request r, decode_request(hdr, payload, data_frames));
#pragma once

#include "runtime/weight_sync/sync_messages.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hart::weight_sync {

/// A read-only view of one received frame; need not be aligned.
struct frame_view {
  const void* data = nullptr;
  size_t size = 0;
};

std::array<uint8_t, 2> request_header();
std::array<uint8_t, 2> reply_header();

status_or<std::vector<uint8_t>> encode_request(const sync_request& r);
status_or<std::vector<uint8_t>> encode_reply(const sync_reply& r);

/// `data` are the frames after the payload (bucket: one per chunk not in CUDA
/// memory, in chunk order, sizes matching).
status_or<sync_request> decode_request(frame_view header, frame_view payload,
                                       const std::vector<frame_view>& data);
status_or<sync_reply> decode_reply(frame_view header, frame_view payload);

/// The wire dtypes (BF16, F16, F32, I32, I64); false for any other.
bool wire_dtype_ok(dtype t);

}  // namespace hart::weight_sync
