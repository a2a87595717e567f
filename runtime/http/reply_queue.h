// File: runtime/http/reply_queue.h
// The replies of one HTTP exchange, an in-process client of the gateway actor: the gateway
// pushes from its thread, the exchange's HTTP thread pops and waits. Bounded (style R20): a
// chunk beyond `chunk_capacity` is dropped and marks the queue overflowed (policy
// `disconnect`: the exchange aborts its generation and ends the response with an error);
// every other reply (final, error, ack, ...) has `headroom` more, so the end of a stream and
// control answers are not lost to a flood of tokens.
//
//   auto q = std::make_shared<reply_queue>();
//   gateway_push(q);                                   // another thread: q->push(reply)
//   while (auto r = q->pop(std::chrono::milliseconds(50))) { ... }
#pragma once

#include "runtime/protocol/messages.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

namespace hart::http {

/// Chunks one exchange may have waiting (a client reading slower than the engine writes).
constexpr size_t k_reply_queue_chunks = 65536;
/// Room for non-chunk replies beyond that.
constexpr size_t k_reply_queue_headroom = 1024;

class reply_queue {
 public:
  explicit reply_queue(size_t chunk_capacity = k_reply_queue_chunks, size_t headroom = k_reply_queue_headroom)
      : chunk_capacity_(chunk_capacity), headroom_(headroom) {}

  /// Thread-safe; never blocks. Returns false when `r` was dropped (queue full).
  bool push(protocol::reply r);
  /// The oldest reply, waiting up to `timeout` for one; nullopt when none came.
  std::optional<protocol::reply> pop(std::chrono::milliseconds timeout);
  /// A reply was dropped: the exchange's stream is incomplete.
  bool overflowed() const;

 private:
  const size_t chunk_capacity_;
  const size_t headroom_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<protocol::reply> q_;  // guarded by m_
  bool overflowed_ = false;        // guarded by m_
};

}  // namespace hart::http
