// File: runtime/protocol/capnp_frame.h
// One Cap'n Proto message read out of one received frame, the same way on
// every wire (the client protocol, the worker link, weight sync, the PD link),
// so that a bound checked on one is checked on all. The frame:
//   - is refused when empty, over the wire's max_bytes, or not whole 8-byte words;
//   - is copied into aligned words only when misaligned (libzmq hands TCP
//     frames at any address, and capnp 0.9.2 rejects unaligned segments;
//     ecosystem.md §4.3);
//   - is read under a traversal budget that grows with its size
//     (traversal_budget_words, capped at the wire's limit) and the wire's
//     nesting limit;
//   - must end where the message ends (no trailing bytes).
// A kj::Exception while reading, the reader callback's included, becomes
// invalid_argument and std::bad_alloc resource_exhausted (style R28); every
// message starts with the wire's name for its frames ("payload", "worker frame").
// Writing is the mirror image: a message filled by a callback, serialized
// into whole words, with the same two exceptions turned into statuses.
//
//   const capnp_frame_limits limits{"worker frame", max_frame_bytes, traversal_limit_words, nesting_limit};
//   return capnp_frame_decode<w::WorkerMessage>(data, size, limits,
//       [&](w::WorkerMessage::Reader root) -> status_or<worker_message> { ... });
//   HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, capnp_frame_write("worker encode", 1024,
//       [&](capnp::MessageBuilder& mb) { fill(mb.initRoot<w::WorkerMessage>()); return status{}; }));
#pragma once

#include "runtime/core/status.h"

#include <capnp/message.h>
#include <kj/function.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace hart::protocol {

/// How one wire bounds its frames.
struct capnp_frame_limits {
  const char* name = "payload";        ///< starts every error message
  size_t max_bytes = 0;                ///< largest frame, checked before any parsing
  uint64_t traversal_limit_words = 0;  ///< the cap of traversal_budget_words
  int nesting_limit = 0;               ///< Cap'n Proto pointer nesting
};

/// Reads [data, data + size) as one message and calls `read` with its reader,
/// which is valid only during the call. Returns the first failure: the frame's
/// checks, then read's own status. `data` need not be aligned.
status capnp_frame_read(const void* data, size_t size, const capnp_frame_limits& limits,
                        kj::FunctionParam<status(capnp::MessageReader&)> read);

/// A message built by `fill` (which may refuse with a status) as one frame of
/// standard unpacked framing: a multiple of 8 bytes. `first_segment_words`
/// sizes the first segment (a message that fits it is one segment). A value
/// Cap'n Proto cannot represent (e.g. a list over 2^29 items) is
/// invalid_argument "<name>: ...".
status_or<std::vector<uint8_t>> capnp_frame_write(const char* name, size_t first_segment_words,
                                                  kj::FunctionParam<status(capnp::MessageBuilder&)> fill);

/// capnp_frame_read with root `Root`, for a `read` returning status_or<T>.
template <typename Root, typename Read>
auto capnp_frame_decode(const void* data, size_t size, const capnp_frame_limits& limits, Read&& read)
    -> decltype(read(std::declval<typename Root::Reader>())) {
  std::optional<decltype(read(std::declval<typename Root::Reader>()))> out;
  HART_RETURN_IF_ERROR(capnp_frame_read(data, size, limits, [&](capnp::MessageReader& m) -> status {
    out.emplace(read(m.getRoot<Root>()));
    return out->get_status();
  }));
  return std::move(*out);
}

}  // namespace hart::protocol
