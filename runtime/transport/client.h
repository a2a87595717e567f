// File: runtime/transport/client.h
// A DEALER client of the message API: send requests, receive replies with a timeout, and run
// one streamed generation to its end. One client is used by one thread at a time.
//
//   auto c = transport::client::connect({.endpoint = "tcp://127.0.0.1:5557"});
//   auto out = c.value()->generate(req, std::chrono::seconds(30),
//                                  [](const protocol::chunk_event& e) { print(e.text); });
//   if (out.ok()) use(out->samples[0].token_ids);
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hart::transport {

struct client_params {
  std::string endpoint = "tcp://127.0.0.1:5557";  ///< the server's endpoint
  std::string routing_id;        ///< optional stable identity (1..255 bytes, not starting with 0)
  std::string curve_server_key;  ///< the server's Z85 public key; enables CURVE
  std::string
      curve_secret_key;  ///< this client's Z85 secret key (public key derived); a fresh pair when empty
};

/// One sample of a finished generation, assembled from its chunks.
struct sample_output {
  std::vector<uint32_t> token_ids;
  std::string text;
  std::vector<float> logprobs;
  uint32_t n_chunks = 0;
  protocol::final_event final;
};

struct generation_result {
  std::vector<sample_output> samples;  ///< indexed by sample index, size n
};

class client {
 public:
  static status_or<std::unique_ptr<client>> connect(const client_params& params);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Validates (validate_request), encodes and sends without blocking for the server.
  status send(const protocol::request& r);
  /// Sends raw frames as one multipart message, bypassing the codec (tests, tools).
  status send_frames(const std::vector<std::string>& frames);

  /// The next reply. unavailable on timeout; invalid_argument for a reply that does not decode.
  status_or<protocol::reply> receive(std::chrono::milliseconds timeout);

  /// Sends `g` and collects its chunks until one final per sample. Replies that belong to
  /// other requests are kept for later receive() calls. Errors: the server's error reply for
  /// this request (or a request-less one), data_loss on a sequence gap, unavailable on timeout
  /// (the whole generation must finish within `timeout`).
  /// `cancelled` (optional) is asked at least every 100 ms (a wait interrupted by a signal is
  /// not an error then); once it says true, `g` is aborted on the server (its ack consumed here)
  /// and its samples end with finals of reason abort, returned as usual.
  status_or<generation_result> generate(
      const protocol::generate_request& g, std::chrono::milliseconds timeout,
      const std::function<void(const protocol::chunk_event&)>& on_chunk = {},
      const std::function<bool()>& cancelled = {});

  struct impl;

 private:
  explicit client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace hart::transport
