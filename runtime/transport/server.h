// File: runtime/transport/server.h
// The ZeroMQ side of the message API: one thread owns a ROUTER socket (ecosystem.md §0.4).
//   inbound : [client id][header][payload] -> decode -> on_request(client_id, request)
//             A frame that does not decode is answered by the server itself with one `error`
//             reply (carrying the request id of a generate, or the tag of a control verb,
//             when the frame got that far; else 0) and is not passed on.
//   outbound: send(client_id, reply) from any thread -> bounded outbox -> eventfd wakes the
//             socket thread -> [client id][header][payload].
//
//   server_params p;                      // tcp://127.0.0.1:5557 by default
//   auto srv = transport::server::start(p, [&](const client_id& c, protocol::request r) {
//     anon_send(gateway, c, std::move(r));   // must not block
//   });
//   srv.value()->send(c, protocol::reply{protocol::health_reply{tag, true, up_us}});
//   srv.value()->stop();
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hart::transport {

/// The ROUTER routing id of a connected DEALER (opaque bytes; may be chosen by the client).
using client_id = std::string;

/// What send() does when the outbox is full.
enum class overflow_policy : uint8_t {
  reject,        ///< return resource_exhausted at once; the caller decides (abort, retry)
  block_sender,  ///< wait until there is room or the server stops (never on the socket thread)
};

struct server_params {
  std::string endpoint = "tcp://127.0.0.1:5557";  ///< bind endpoint; "tcp://127.0.0.1:*" = any port
  /// Z85 CURVE secret key (40 chars). Required to bind anything but loopback, ipc or inproc.
  std::string curve_secret_key;
  /// Z85 public keys of the clients let in (curve_auth.h's ZAP handler); empty: any client
  /// that knows the server's public key. Needs curve_secret_key.
  std::vector<std::string> curve_allowed_clients;
  /// Connections open at once; a handshake beyond it is refused (the peer never connects) and
  /// counted (server_counters::connections_refused). 0: no limit.
  int64_t max_connections = 0;
  size_t outbox_capacity = 65536;  ///< queued chunk replies (messages)
  /// Extra room for every reply that is not a chunk (final, error, ack, ...), so the end of a
  /// stream and control answers are not refused because tokens filled the outbox.
  size_t control_headroom = 1024;
  overflow_policy overflow = overflow_policy::reject;
  int send_hwm = 100000;  ///< ZMQ_SNDHWM, messages per peer
  int recv_hwm = 100000;  ///< ZMQ_RCVHWM
  /// A peer whose pipe stays full this long (or that falls outbox_capacity replies behind) is a
  /// slow reader: see server::start. Other peers' replies never wait for it.
  int stall_timeout_ms = 2000;

  status validate() const;
};

/// Counters since start; read with relaxed ordering (monotonic, for stats only).
struct server_counters {
  uint64_t received = 0;             ///< well-formed requests handed to on_request
  uint64_t decode_errors = 0;        ///< bad frames answered with an error reply
  uint64_t sent = 0;                 ///< replies written to the socket
  uint64_t unroutable = 0;           ///< replies dropped: the client was gone (EHOSTUNREACH)
  uint64_t stalled = 0;              ///< chunks dropped for slow readers (each told so by an error)
  uint64_t rejected = 0;             ///< send() calls refused because the outbox was full
  uint64_t slow_clients = 0;         ///< times a peer was declared a slow reader
  uint64_t auth_refused = 0;         ///< CURVE handshakes refused: the client key is not in the allowlist
  uint64_t connections_refused = 0;  ///< handshakes refused at max_connections
  int64_t connections = 0;           ///< open now
  uint64_t disconnects = 0;          ///< clients whose connection closed after they sent a request
};

/// Called on the socket thread for every well-formed request. It must not block (post to an
/// actor, a queue, ...) and must not throw; every reply goes through server::send.
using request_handler = std::function<void(const client_id& client, protocol::request request)>;

/// Called on the socket thread, once per episode, when a peer becomes a slow reader. Same rules
/// as request_handler (hart serve aborts the client's generations).
using slow_client_handler = std::function<void(const client_id& client)>;

/// Called on the socket thread, once, when the connection of a client that sent requests
/// closes (the client process ended, its socket closed, the network dropped it). Same rules as
/// request_handler (hart serve aborts the client's generations: nobody reads them any more).
using disconnect_handler = std::function<void(const client_id& client)>;

class server {
 public:
  /// Binds and starts the socket thread. Fails (without a thread) on invalid params, a
  /// non-loopback endpoint without CURVE, or a bind error.
  ///
  /// Flow control: a peer whose pipe is at its HWM gets its replies queued here in order while
  /// other peers' go on. If it reads nothing for stall_timeout_ms (or falls outbox_capacity
  /// replies behind) it is a slow reader: its queued chunks are dropped, its other replies kept
  /// behind one resource_exhausted error saying so, its later chunks dropped until it has read
  /// everything (counted in `stalled`), and on_slow_client (optional) is called once. Nothing
  /// is lost without the client being told.
  ///
  /// Disconnects: every inbound message's connection (its file descriptor, ZMQ_SRCFD) is
  /// remembered per client; when the socket's monitor reports that descriptor closed,
  /// on_disconnect (optional) is called for each client that used it. The monitor is read
  /// before any later handshake is answered, so a new connection that reuses the descriptor
  /// is never taken for the closed one.
  static status_or<std::unique_ptr<server>> start(const server_params& params, request_handler on_request,
                                                  slow_client_handler on_slow_client = nullptr,
                                                  disconnect_handler on_disconnect = nullptr);

  ~server();  ///< stop()s
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound endpoint with the actual port (ZMQ_LAST_ENDPOINT).
  const std::string& endpoint() const;

  /// Thread-safe. Encodes `r` on the calling thread and queues it. Errors: resource_exhausted
  /// (outbox full under `reject`), unavailable (stopped), invalid_argument (not encodable).
  status send(const client_id& client, const protocol::reply& r);

  /// Stops the thread (pending outbox entries are dropped, linger 0). Idempotent; returns
  /// promptly whatever clients do.
  void stop();

  server_counters counters() const;

  struct impl;

 private:
  explicit server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// True when binding `endpoint` stays on this host (tcp 127.0.0.0/8, localhost, [::1], ipc, inproc).
bool endpoint_is_local(const std::string& endpoint);

}  // namespace hart::transport
