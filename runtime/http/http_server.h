// File: runtime/http/http_server.h
// The HTTP front door of `hart serve` (docs/http.md): cpp-httplib's threads answer OpenAI- and
// SGLang-compatible JSON endpoints by turning each request into protocol requests for the
// gateway actor (the ZeroMQ gateway's conversion and validation: validate.h, the gateway's
// tokenizer and chat template), one exchange per HTTP request. Loopback only unless an API
// key is set, then every endpoint but /health wants `Authorization: Bearer KEY`.
//
//   http_params p;
//   p.bind = "127.0.0.1:0";                       // any free port
//   auto srv = http_server::start(p, [&](const std::string& c, protocol::request r, auto q) {
//     caf::anon_send(gateway, inbound_atom::value, make_inbound(c, std::move(r), q));
//   });
//   srv.value()->endpoint();                      // "127.0.0.1:40123"
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/exchange.h"
#include "runtime/http/json_fields.h"
#include "runtime/text/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hart::http {

struct http_params {
  std::string bind = "127.0.0.1:30000";  ///< host:port; port 0 = any free one
  /// Required for a host that is not loopback; then every request but /health must carry
  /// `Authorization: Bearer <api_key>`.
  std::string api_key;
  size_t max_body_bytes = size_t{8} << 20;  ///< larger request bodies get 413
  /// Threads answering requests: the most exchanges (a stream holds one) served at once;
  /// more connections wait for a thread.
  int threads = 64;
  std::string model_name;          ///< /v1/models; a request's `model` must be this (or absent)
  std::string model_path;          ///< /model_info
  int64_t max_context = 0;         ///< /v1/models max_model_len (0 = unknown)
  int32_t eos_token_id = -1;       ///< the stop token the scheduler ends samples with (< 0: none)
  const tokenizer* tok = nullptr;  ///< token texts of log-probs; may be null; outlives the server
  /// /server_info's server_args: how the server was started (options, precision, page size, ...).
  json server_args = json::object();

  status validate() const;
};

/// A weight update asked over HTTP: the checkpoint directory to serve (empty: relabel the
/// serving weights) as `version` (0: the serving version + 1).
struct weights_update {
  std::string checkpoint_dir;
  uint64_t version = 0;
};
/// Runs `u` (the weight-sync actor does, one update at a time, at a step boundary) and calls
/// `done` once with the result and the version serving after it, on any thread; must not block.
using weights_fn = std::function<void(const weights_update& u, std::function<void(status, uint64_t)> done)>;

class http_server {
 public:
  /// Binds and starts the threads. invalid_argument for bad params (a non-loopback host
  /// without api_key among them), unavailable when the address does not bind. Without
  /// `weights` the weight endpoints answer 501 (the engine runs in a worker process).
  static status_or<std::unique_ptr<http_server>> start(const http_params& params, submit_fn submit,
                                                       weights_fn weights = nullptr);

  ~http_server();  ///< stop()s
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// host:port with the bound port.
  std::string endpoint() const;
  /// Ends every exchange (waiting ones answer 503, streams end) and joins the threads. Idempotent.
  void stop();

  struct impl;

 private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Splits "host:port" or "[v6]:port"; invalid_argument naming `what` when malformed.
status split_host_port(const std::string& text, std::string* host, int* port);
/// 127.0.0.0/8, localhost, ::1.
bool host_is_loopback(const std::string& host);

}  // namespace hart::http
