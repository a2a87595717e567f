// File: runtime/pd/decode_link.h
// The decode server's end of the PD link (docs/pd.md): one ZeroMQ DEALER
// connected to a prefill server, on a thread of its own. send() may be called
// from any thread (the message is encoded there and queued; the thread sends
// it); every message that arrives is decoded on the thread and handed to
// `on_message`, or, when it cannot be read, to `on_bad_frame` with why. ZeroMQ
// reconnects by itself: a prefill server that is not running yet or restarts
// is reached when it comes up; one that never answers is the caller's
// timeout to notice.
//
//   HART_ASSIGN_OR_RETURN(auto link, pd::decode_link::connect(ep, on_message, on_bad_frame));
//   HART_RETURN_IF_ERROR(link->send(pd_link::pd_message{rid, tid, pd_link::prefill_request{...}}));
#pragma once

#include "runtime/core/status.h"
#include "runtime/pd_link/pd_messages.h"

#include <functional>
#include <memory>
#include <string>

namespace hart::pd {

class decode_link {
 public:
  using message_fn = std::function<void(pd_link::pd_message)>;
  using bad_frame_fn = std::function<void(status)>;

  /// invalid_argument for an endpoint ZeroMQ cannot connect to.
  static status_or<std::unique_ptr<decode_link>> connect(const std::string& endpoint, message_fn on_message,
                                                         bad_frame_fn on_bad_frame);
  ~decode_link();
  decode_link(const decode_link&) = delete;
  decode_link& operator=(const decode_link&) = delete;

  /// Queues `m` for the prefill server; an error only when it cannot be encoded.
  status send(const pd_link::pd_message& m);
  const std::string& endpoint() const;

  struct impl;

 private:
  explicit decode_link(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace hart::pd
