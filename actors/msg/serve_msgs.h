// File: actors/msg/serve_msgs.h
// Payloads of the serving actors' messages. Immutable once sent; they travel
// as std::shared_ptr<const T> (CAF 0.17 messages must be copyable, ecosystem.md §2.3).
#pragma once

#include "runtime/http/reply_queue.h"
#include "runtime/protocol/messages.h"
#include "runtime/sched/request.h"
#include "runtime/transport/server.h"

#include <cstdint>
#include <string>

namespace hart::actors {

/// A decoded request as the transport thread (ZeroMQ) or an HTTP exchange received it.
struct inbound_request {
  transport::client_id client;
  protocol::request request;
  /// An HTTP exchange's replies go here instead of the ZeroMQ socket (its client id can be no
  /// ZeroMQ peer's: runtime/http/exchange.h). Null for ZeroMQ clients.
  std::shared_ptr<http::reply_queue> local;
  /// The server's own request on the client's behalf (a slow reader's "abort all"): no ack.
  bool from_server = false;
};

/// A tokenized generation the scheduler actor can submit as is.
struct submit_request {
  sched::gen_request request;  // id = the gateway's internal id
};

/// A control verb; `ids` are the internal ids it concerns (abort).
struct control_call {
  transport::client_id client;
  protocol::control_request control;
  std::vector<uint64_t> ids;
  bool ack = true;  ///< answer the client (false for inbound_request::from_server)
};

/// A reply for one client (control answers, errors).
struct addressed_reply {
  transport::client_id client;
  protocol::reply reply;
};

}  // namespace hart::actors
