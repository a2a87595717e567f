// File: runtime/pd/prefill_server.h
// The prefill side of prefill/decode disaggregation (`hart serve --role
// prefill`, docs/pd.md): a ZeroMQ ROUTER that takes `prefill` messages from
// decode servers, computes each prompt on the CPU engine in chunks over its
// own ShadowRadix pages (its own prefix cache), samples the first token as a
// colocated server's step would (the same step plan through an
// engine_executor), exports the KV by page range (kv_pages_plan /
// kv_pages_export, without the skipFull pages the decode side holds) as
// kvChunk frames, then kvDone. The pages stay held until the decode side
// answers kvAck or kvRefuse, or until ack_timeout_ms passes without an
// answer; then the request finishes into the prefix cache. A prefill it will
// not compute (another page layout, no KV memory, an engine error) is
// answered with kvRefuse. One thread; prefills run one at a time, in order.
//
//   HART_ASSIGN_OR_RETURN(auto srv, pd::prefill_server::start(eng, params));
//   std::printf("prefill on %s\n", srv->endpoint().c_str());
//   ... srv->state() ...   // until the destructor stops it
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/core/status.h"
#include "runtime/model/engine.h"
#include "runtime/pd_link/pd_messages.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hart::pd {

struct prefill_server_params {
  std::string endpoint = "tcp://127.0.0.1:*";            // the ROUTER's bind
  cache::cache_config cache;                             // its pools and prefix cache (window: the model's)
  int64_t prefill_chunk = 512;                           // most prompt tokens per engine step
  size_t max_chunk_bytes = pd_link::max_chunk_kv_bytes;  // KV per kvChunk
  int64_t ack_timeout_ms = 60000;  // pages held for a decode side that does not answer, at most
  int32_t vocab_size = 0;          // tokens outside it are refused
};

/// What a prefill server did, for stats and tests.
struct prefill_server_state {
  cache::cache_metrics cache;
  status check;             // the prefix cache's invariants
  int64_t held = 0;         // transfers whose pages wait for the decode side's answer
  int64_t prefills = 0;     // prompts computed and sent
  int64_t acked = 0;        // answered kvAck
  int64_t refused = 0;      // refused by either side
  int64_t timed_out = 0;    // no answer within ack_timeout_ms
  int64_t chunks_sent = 0;  // kvChunk messages
  int64_t full_pages_sent = 0;
};

class prefill_server {
 public:
  /// Binds and starts serving on a thread of its own; `eng` must outlive it.
  static status_or<std::unique_ptr<prefill_server>> start(const engine& eng, prefill_server_params params);
  ~prefill_server();
  prefill_server(const prefill_server&) = delete;
  prefill_server& operator=(const prefill_server&) = delete;

  /// The bound endpoint, its port resolved.
  std::string endpoint() const;
  /// A consistent snapshot (between two messages).
  prefill_server_state state() const;

  struct impl;

 private:
  explicit prefill_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace hart::pd
