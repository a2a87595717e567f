// File: runtime/protocol/wire_convert.h  (internal to runtime/protocol; not for other components)
// Field-by-field copies between the generated Cap'n Proto classes and messages.h. Readers may
// throw kj::Exception on malformed input; codec.cpp is the only caller, and capnp_frame.h,
// which it reads through, catches it.
// Unknown enum values and unknown union members become invalid_argument statuses.
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/hart.capnp.h"
#include "runtime/protocol/messages.h"

namespace hart::protocol::internal {

void write_request(const request& in, wire::Request::Builder out);
void write_reply(const reply& in, wire::Reply::Builder out);

status_or<request> read_request(wire::Request::Reader in);
status_or<reply> read_reply(wire::Reply::Reader in);

/// Final.routing both ways; read checks every layer holds positions x k ids.
void write_routing(const routing_info& r, wire::Routing::Builder out);
status_or<routing_info> read_routing(wire::Routing::Reader in);

}  // namespace hart::protocol::internal
