// File: runtime/transport/curve_auth.h
// Who may talk to a server: key files (never argv, where `ps` shows them) and a ZAP handler
// (ZeroMQ RFC 27) that lets in only the client public keys of an allowlist, and no more
// connections than a limit.
//
//   HART_ASSIGN_OR_RETURN(std::string secret, curve_key_file_read("server.key", true));
//   HART_ASSIGN_OR_RETURN(auto allowed, curve_allowlist_read("clients.pub"));
//   HART_ASSIGN_OR_RETURN(auto zap, zap_authenticator::start(ctx, {allowed, 0, ""}));  // before bind
//   sock.set(zmq::sockopt::zap_domain, "hart");
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace hart::transport {

/// The Z85 key (40 characters) a key file holds: its first line that is not blank or a
/// `#` comment. `secret`: the file must not be readable by group or others (as ssh requires of
/// a private key). invalid_argument naming the file otherwise, not_found when it is missing.
status_or<std::string> curve_key_file_read(const std::string& path, bool secret);

/// The Z85 public keys of an allowlist file, one per line (blank and `#` lines skipped).
/// invalid_argument naming the line of a key that is not 40 Z85 characters, or an empty list.
status_or<std::vector<std::string>> curve_allowlist_read(const std::string& path);

/// The public key (Z85) of a Z85 secret key.
status_or<std::string> curve_public_of(const std::string& secret_z85);

/// Makes `sock` a CURVE client of the server with public key `server_z85` (nothing when
/// empty), as the key pair of `secret_z85` (its public key derived) or, when that is empty, a
/// fresh pair (the server then knows nothing of this client: fine without an allowlist).
status curve_client_setup(zmq::socket_t& sock, const std::string& server_z85, const std::string& secret_z85);

/// Writes a fresh key pair: `prefix`.key (the secret, mode 0600) and `prefix`.pub. Refuses
/// to overwrite either (failed_precondition).
status curve_keypair_write(const std::string& prefix);

/// What a zap_authenticator lets in.
struct zap_rules {
  /// CURVE clients: only these Z85 public keys (empty: any key; NULL-mechanism peers need none).
  std::vector<std::string> allowed_clients;
  /// Connections open at once (0: no limit), counted from `monitor_endpoint`: the guarded
  /// socket's monitor (zmq_socket_monitor with ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED).
  int64_t max_connections = 0;
  std::string monitor_endpoint;
  /// Called on the authenticator's thread with the file descriptor of every connection that
  /// closed (needs monitor_endpoint), before any later handshake is answered: a connection
  /// that reuses the descriptor is always told apart from the closed one (server.cpp).
  std::function<void(int fd)> on_disconnected;
};

/// Answers ZAP requests on `ctx` from its own thread: a handshake is refused when its CURVE key
/// is not in the allowlist or when max_connections connections are already open; every other
/// handshake is let in (a CURVE key becomes the user id). Refusals are logged (a key once, the
/// limit once per episode) and counted. Start it before binding the sockets it guards, and set
/// their zap_domain; it stops (joins) when destroyed, which must happen before the context is
/// closed.
class zap_authenticator {
 public:
  static status_or<std::unique_ptr<zap_authenticator>> start(zmq::context_t& ctx, zap_rules rules);
  ~zap_authenticator();
  zap_authenticator(const zap_authenticator&) = delete;
  zap_authenticator& operator=(const zap_authenticator&) = delete;

  /// Handshakes let in, refused for their key, refused for the connection limit; connections open.
  uint64_t accepted() const;
  uint64_t refused() const;
  uint64_t refused_connections() const;
  int64_t connections() const;

 private:
  struct impl;
  explicit zap_authenticator(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace hart::transport
