// File: actors/gateway_actor.h
// The gateway actor: turns decoded wire requests into scheduler requests
// (tokenizing chat messages and text, assigning internal ids), forwards
// control verbs to the scheduler actor, and streams its events back to each client as
// chunk and final replies: through the transport server to ZeroMQ peers, into its
// reply_queue to an HTTP exchange (runtime/http; inbound_request::local), one
// bookkeeping for both.
#pragma once

#include "actors/caf_compat.h"
#include "runtime/text/tokenizer.h"
#include "runtime/transport/server.h"

#include <memory>

namespace hart::actors {

struct gateway_params {
  std::shared_ptr<transport::server> server;  // replies go out here (thread-safe send)
  scheduler_actor scheduler;
  const tokenizer* tok = nullptr;  // may be null: token-id prompts only
  int64_t vocab_size = 0;
  /// Routing ids one message carries; a longer routing goes in routing parts.
  int64_t max_routing_ids = protocol::max_routing_ids;
  /// The scheduler's (0 = none): a prompt that leaves no room under it is refused here.
  int64_t max_context = 0;
  /// Admission limits (0 = none): generations accepted and not yet finished, in all and per
  /// client, and their prompt tokens in all. Past one, a generate is refused with
  /// resource_exhausted naming the limit; nothing else changes.
  int64_t max_requests = 0;
  int64_t max_requests_per_client = 0;
  int64_t max_prompt_tokens = 0;
};

gateway_actor spawn_gateway_actor(caf::actor_system& sys, const gateway_params& params);

}  // namespace hart::actors
