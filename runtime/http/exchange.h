// File: runtime/http/exchange.h
// One HTTP request's conversation with the gateway actor, from an HTTP server thread: it is a
// client of the gateway like a ZeroMQ peer, with a client id of its own and a reply_queue
// instead of a socket. The id ("\0http-<serial>") can be no peer's: ZeroMQ refuses routing ids
// that start with a zero byte except the 5-byte ones it makes up itself. The thread blocks on
// the queue, never on an actor; `submit` only posts (caf::anon_send).
//
//   exchange ex(submit, next_client_id());
//   ex.submit(g);                                  // protocol::generate_request
//   while (auto r = ex.next(50ms)) gen.apply(*r);
//   ex.abort();                                    // the client went away
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/reply_queue.h"
#include "runtime/protocol/messages.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace hart::http {

/// Hands `request` from `client` to the gateway actor with the queue its replies go to. Called
/// on HTTP threads; must not block.
using submit_fn = std::function<void(const std::string& client, protocol::request request,
                                     std::shared_ptr<reply_queue> replies)>;

/// The request id an exchange gives its one generation.
constexpr uint64_t k_exchange_request_id = 1;

class exchange {
 public:
  exchange(submit_fn submit, std::string client)
      : submit_(std::move(submit)), client_(std::move(client)), replies_(std::make_shared<reply_queue>()) {}

  const std::string& client() const { return client_; }

  /// Sends `c` and waits up to `timeout` for its answer (ack, health, stats, weight version or
  /// error reply); unavailable when none comes.
  status_or<protocol::reply> control(protocol::control_request c, std::chrono::milliseconds timeout);
  /// Submits `g` as request k_exchange_request_id of this client.
  void submit(protocol::generate_request g);
  /// The next reply, waiting up to `timeout`.
  std::optional<protocol::reply> next(std::chrono::milliseconds timeout) { return replies_->pop(timeout); }
  /// Replies were dropped (the queue was full): the generation's output is incomplete.
  bool overflowed() const { return replies_->overflowed(); }
  /// Asks the gateway to abort this exchange's generation; its remaining samples end with
  /// reason abort (the answer to the abort itself is ignored). Idempotent; any thread.
  void abort();

 private:
  submit_fn submit_;
  std::string client_;
  std::shared_ptr<reply_queue> replies_;
  std::atomic<bool> aborted_{false};
};

/// Tag of an exchange's aborts: their answers are not the generation's.
constexpr uint64_t k_abort_tag = 0xab0;

}  // namespace hart::http
