#include "runtime/protocol/codec.h"

#include "runtime/core/wire_limits.h"
#include "runtime/protocol/validate.h"
#include "runtime/protocol/wire_convert.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <cstring>
#include <exception>
#include <new>

namespace hart::protocol {
namespace {

// Capn Proto throws kj::Exception on malformed input or when a builder cannot represent a
// value; this file is the boundary where those become statuses (style R28).
template <typename Root, typename Fill>
status_or<encoded_frames> encode(frame_kind kind, Fill&& fill) {
  try {
    capnp::MallocMessageBuilder mb(1024);
    fill(mb.initRoot<Root>());
    size_t words = capnp::computeSerializedSizeInWords(mb);
    encoded_frames out;
    out.header = frame_header(kind);
    out.payload.resize(words * sizeof(capnp::word));
    kj::ArrayOutputStream os(kj::arrayPtr(out.payload.data(), out.payload.size()));
    capnp::writeMessage(os, mb);
    return out;
  } catch (const kj::Exception& e) {
    return invalid_argument("encode: %s", e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("encode: out of memory");
  }
}

status check_header(byte_view header, frame_kind expected) {
  if (header.size != 2 || header.data == nullptr)
    return invalid_argument("frame header: %zu bytes, expected 2 [version, kind]", header.size);
  const auto* h = static_cast<const uint8_t*>(header.data);
  if (h[0] != protocol_version)
    return invalid_argument("frame header: protocol version %u, this peer speaks %u", h[0], protocol_version);
  if (h[1] != static_cast<uint8_t>(expected))
    return invalid_argument("frame header: kind %u, expected %u", h[1], static_cast<unsigned>(expected));
  return {};
}

status check_payload(byte_view payload) {
  if (payload.size == 0 || payload.data == nullptr) return invalid_argument("payload: empty frame");
  if (payload.size > max_frame_bytes)
    return invalid_argument("payload: %zu bytes, limit %zu", payload.size, max_frame_bytes);
  if (payload.size % sizeof(capnp::word) != 0)
    return invalid_argument("payload: %zu bytes is not a multiple of 8", payload.size);
  return {};
}

template <typename T, typename Root, typename Read>
status_or<T> decode(byte_view header, byte_view payload, frame_kind kind, Read&& read) {
  HART_RETURN_IF_ERROR(check_header(header, kind));
  HART_RETURN_IF_ERROR(check_payload(payload));
  try {
    // NOTE(protocol): libzmq hands TCP frames at any address (ecosystem.md §4.3) and capnp
    // 0.9.2 rejects unaligned segments, so misaligned input is copied into aligned words.
    kj::Array<capnp::word> owned;
    kj::ArrayPtr<const capnp::word> words;
    size_t n_words = payload.size / sizeof(capnp::word);
    if (reinterpret_cast<uintptr_t>(payload.data) % alignof(capnp::word) == 0) {
      words = kj::arrayPtr(static_cast<const capnp::word*>(payload.data), n_words);
    } else {
      owned = kj::heapArray<capnp::word>(n_words);
      std::memcpy(owned.begin(), payload.data, payload.size);
      words = owned.asPtr();
    }
    capnp::ReaderOptions opts;
    opts.traversalLimitInWords = traversal_budget_words(n_words, traversal_limit_words);
    opts.nestingLimit = nesting_limit;
    capnp::FlatArrayMessageReader reader(words, opts);
    if (reader.getEnd() != words.end())
      return invalid_argument("payload: %zu trailing bytes after the message",
                              static_cast<size_t>(words.end() - reader.getEnd()) * sizeof(capnp::word));
    return read(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    return invalid_argument("payload: malformed Cap'n Proto message: %s", e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("payload: out of memory while decoding");
  }
}

}  // namespace

std::array<uint8_t, 2> frame_header(frame_kind kind) {
  return {protocol_version, static_cast<uint8_t>(kind)};
}

status_or<encoded_frames> encode_request(const request& r) {
  return encode<wire::Request>(frame_kind::request,
                               [&](wire::Request::Builder b) { internal::write_request(r, b); });
}

status_or<encoded_frames> encode_reply(const reply& r) {
  return encode<wire::Reply>(frame_kind::reply, [&](wire::Reply::Builder b) { internal::write_reply(r, b); });
}

status_or<request> decode_request(byte_view header, byte_view payload, request_ref* ref) {
  request_ref seen;
  status_or<request> out = decode<request, wire::Request>(
      header, payload, frame_kind::request, [&](wire::Request::Reader root) -> status_or<request> {
        // Read first, so that a failure further in is answered to this request; a pointer
        // that throws here leaves the ref at what was read before.
        if (root.which() == wire::Request::GENERATE) {
          seen.request_id = root.getGenerate().getRequestId();
        } else {
          seen.tag = root.getTag();
        }
        HART_ASSIGN_OR_RETURN(request r, internal::read_request(root));
        HART_RETURN_IF_ERROR(validate_request(r));
        return r;
      });
  if (ref) *ref = out.ok() ? request_ref{} : seen;
  return out;
}

status_or<reply> decode_reply(byte_view header, byte_view payload) {
  return decode<reply, wire::Reply>(header, payload, frame_kind::reply,
                                    [](wire::Reply::Reader root) -> status_or<reply> {
                                      HART_ASSIGN_OR_RETURN(reply r, internal::read_reply(root));
                                      HART_RETURN_IF_ERROR(validate_reply(r));
                                      return r;
                                    });
}

error_reply error_reply_from(const status& s, uint64_t request_id, uint64_t tag) {
  return error_reply{tag, request_id, s.code(), s.message()};
}

}  // namespace hart::protocol
