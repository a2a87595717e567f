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
//   ex.abort("the client went away");               // its finals say so
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/reply_queue.h"
#include "runtime/protocol/messages.h"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
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
  /// The next reply, waiting up to `timeout`. A final that ends a sample with abort carries
  /// why as its error_message (the scheduler sends none): the first reason named, else
  /// k_abort_unexplained.
  std::optional<protocol::reply> next(std::chrono::milliseconds timeout);
  /// Replies were dropped (the queue was full): the generation's output is incomplete.
  bool overflowed() const { return replies_->overflowed(); }
  /// Asks the gateway to abort this exchange's generation; its remaining samples end with
  /// reason abort and `why` as their message, whatever name_abort said (the answer to the
  /// abort itself is ignored). Idempotent: the first call's reason stays; any thread.
  void abort(const std::string& why);
  /// Names why this generation will end with abort when something else than this exchange
  /// aborts it (a pause in abort mode aborts every generation in the scheduler), unless a
  /// reason is set already. Any thread.
  void name_abort(const std::string& why);

 private:
  submit_fn submit_;
  std::string client_;
  std::shared_ptr<reply_queue> replies_;
  std::mutex abort_m_;
  bool aborted_ = false;      // guarded by abort_m_
  std::string abort_reason_;  // guarded by abort_m_
};

/// The message of an abort no one here named (a pause sent over the ZeroMQ API, say): SGLang's
/// default for an abort.
inline constexpr const char* k_abort_unexplained = "Aborted";

/// Tag of an exchange's aborts: their answers are not the generation's.
constexpr uint64_t k_abort_tag = 0xab0;

}  // namespace hart::http
