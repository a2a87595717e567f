// File: runtime/weight_sync/sync_server.h
// The server end of the weight-sync wire: one thread owns a ZeroMQ ROUTER
// socket, whose context receives up to a quarter of the cores' connections
// in parallel (a client may push over several). Inbound messages are decoded (sync_codec.h) and handed to the
// handler with their data frames still in the received ZeroMQ buffers (no
// copy); a message that does not decode is answered with an error reply by
// the thread itself. Replies go through send() from any thread. While more
// than `max_inflight_bytes` of handed-over data frames are alive, the thread
// stops reading, so TCP flow control slows the trainer instead of memory
// growing without bound.
//
//   auto srv = sync_server::start(p, [&](const std::string& client, std::shared_ptr<const inbound_sync> m) {
//     anon_send(weight_sync_actor, sync_atom::value, client, m);   // must not block
//   });
#pragma once

#include "runtime/core/status.h"
#include "runtime/weight_sync/sync_codec.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hart::weight_sync {

struct sync_server_params {
  std::string endpoint = "tcp://127.0.0.1:5558";  ///< "tcp://127.0.0.1:*" = any port; loopback unless CURVE
  std::string curve_secret_key;                   ///< Z85; required for a non-loopback bind
  std::vector<std::string>
      curve_allowed_clients;  ///< Z85 public keys let in (empty: any); needs curve_secret_key
  uint64_t max_inflight_bytes = uint64_t(2) << 30;  ///< received data not yet released by the handler

  status validate() const;
};

/// A decoded message, and for a bucket its data frames (views into buffers
/// this object keeps alive; dropping it releases them).
struct inbound_sync {
  std::string client;  ///< ROUTER routing id of the sender
  sync_request request;
  std::vector<frame_view> data;
  std::shared_ptr<void> owner;  ///< the ZeroMQ messages behind `data`
};

using sync_handler = std::function<void(std::shared_ptr<const inbound_sync>)>;

class sync_server {
 public:
  static status_or<std::unique_ptr<sync_server>> start(const sync_server_params& params,
                                                       sync_handler on_message);
  ~sync_server();  ///< stop()s
  sync_server(const sync_server&) = delete;
  sync_server& operator=(const sync_server&) = delete;

  const std::string& endpoint() const;
  /// Thread-safe; queues the reply for `client`. unavailable once stopped.
  status send(const std::string& client, const sync_reply& r);
  void stop();

  struct impl;

 private:
  explicit sync_server(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

}  // namespace hart::weight_sync
