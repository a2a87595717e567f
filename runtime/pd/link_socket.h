// File: runtime/pd/link_socket.h
// The PD link's ZeroMQ side, shared by the prefill server (a ROUTER) and the
// decode server (a DEALER): socket options, one pd_message per message
// ([routing id] on the ROUTER side, then one frame), and the conversions
// between a generate's sampling and the prefill message's.
//
//   zmq::socket_t s = pd::link_socket(ctx, zmq::socket_type::dealer);
//   HART_RETURN_IF_ERROR(pd::link_send(s, nullptr, m));
#pragma once

#include "runtime/core/status.h"
#include "runtime/pd_link/pd_messages.h"
#include "runtime/sched/request.h"

#include <zmq.hpp>

#include <cstdint>
#include <vector>

namespace hart::pd {

/// A socket of the link: no linger, frames up to pd_link::max_frame_bytes.
zmq::socket_t link_socket(zmq::context_t& ctx, zmq::socket_type type);

/// Encodes and sends `m`, after `routing_id` when given (ROUTER side). Never blocks:
/// unavailable when the peer cannot take it now (or is unknown to the ROUTER).
status link_send(zmq::socket_t& s, const zmq::message_t* routing_id, const pd_link::pd_message& m);
/// An encoded frame, as link_send sends it.
status link_send_frame(zmq::socket_t& s, const zmq::message_t* routing_id, const std::vector<uint8_t>& frame);

/// The sampling a prefill message carries for generate `r` (its first token's).
protocol::sampling_options link_sampling(const sched::gen_request& r);
/// The gen_request fields the prefill server samples the first token with (sample 0).
sched::gen_request link_request(const pd_link::prefill_request& p);

}  // namespace hart::pd
