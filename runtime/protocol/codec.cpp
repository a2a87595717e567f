#include "runtime/protocol/codec.h"

#include "runtime/protocol/capnp_frame.h"
#include "runtime/protocol/validate.h"
#include "runtime/protocol/wire_convert.h"

#include <utility>

namespace hart::protocol {
namespace {

// The frames of one wire; capnp_frame turns kj::Exception into a status (style R28).
constexpr capnp_frame_limits frame_limits{"payload", max_frame_bytes, traversal_limit_words, nesting_limit};

template <typename Root, typename Fill>
status_or<encoded_frames> encode(frame_kind kind, Fill&& fill) {
  encoded_frames out;
  out.header = frame_header(kind);
  HART_ASSIGN_OR_RETURN(out.payload, capnp_frame_write("encode", 1024, [&](capnp::MessageBuilder& mb) {
                          fill(mb.initRoot<Root>());
                          return status{};
                        }));
  return out;
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

template <typename T, typename Root, typename Read>
status_or<T> decode(byte_view header, byte_view payload, frame_kind kind, Read&& read) {
  HART_RETURN_IF_ERROR(check_header(header, kind));
  return capnp_frame_decode<Root>(payload.data, payload.size, frame_limits, std::forward<Read>(read));
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
