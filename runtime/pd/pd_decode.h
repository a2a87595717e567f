// File: runtime/pd/pd_decode.h
// The decode server's side of each prefill/decode hand-off (docs/pd.md), as
// plain C++ behind a port (the scheduler actor is the port in `hart serve
// --role decode`): a new request's pages are reserved on the cache shard for
// its prompt and the first decode step (a prefix hit there: skip_full), the
// prompt goes to the prefill server, each kvChunk is imported by the worker
// into the reserved pages (the SWA pages of the decode side's own prefix left
// out: it keeps its window over them), and on kvDone, once every chunk is in,
// the sequence joins the scheduler's running set (scheduler::admit_prefilled)
// with the first token, and the prefill server gets kvAck.
//
// Failure: no answer from the prefill server for timeout_ms (not running,
// killed, wedged), its kvRefuse, or a chunk that is malformed or does not
// import ends the request with one typed error (unavailable, or
// failed_precondition for another page layout, internal for a bad chunk;
// refused: the client gets one error reply), sends kvRefuse when the prefill
// server may still hold pages for it, and releases the reserved pages once no
// import into them is pending. A client abort ends it the same way with
// reason abort.
//
//   pd_decode pd(params, &port);
//   pd.submit(req);                // port.reserve -> pd.on_reserved -> port.send(prefill)
//   pd.on_message(m);              // from the link: port.import(chunk) -> pd.on_imported
#pragma once

#include "runtime/cache/shard_protocol.h"
#include "runtime/core/status.h"
#include "runtime/model/kv_transfer.h"
#include "runtime/pd_link/pd_messages.h"
#include "runtime/sched/prefilled.h"
#include "runtime/sched/request.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hart::pd {

/// One chunk for the worker to write into a transfer's reserved pages (kv_pages_import).
struct kv_import {
  uint64_t transfer_id = 0;
  kv_pages kv;
  std::vector<int32_t> full, swa;  // the reserved page tables, by position
};

/// Everything pd_decode sends; answers come back through its on_* calls,
/// never from inside one of these.
class pd_decode_port {
 public:
  virtual ~pd_decode_port() = default;
  /// Pages on the cache shard (answer: on_reserved).
  virtual void reserve(cache::prefill_reservation r) = 0;
  /// A message to the prefill server.
  virtual void send(const pd_link::pd_message& m) = 0;
  /// A chunk to the worker (answer: on_imported, in the order sent).
  virtual void import(std::shared_ptr<const kv_import> c) = 0;
  /// Ends a cache request the hand-off reserved (an abort op to the shard).
  virtual void release(cache::request_id id) = 0;
  /// scheduler::admit_prefilled, its events published and the next step planned.
  virtual status admit(sched::gen_request r, const sched::prefilled& p) = 0;
  virtual void publish(sched::event_batch ev) = 0;
  /// on_timeout(transfer_id, generation) after `delay`.
  virtual void wake_after(uint64_t transfer_id, uint64_t generation, std::chrono::milliseconds delay) = 0;
  /// The scheduler's clock (µs).
  virtual int64_t now_us() = 0;
};

struct pd_decode_params {
  std::string endpoint;        // the prefill server's, for messages
  uint64_t layout = 0;         // this server's kv_store::layout_id
  int64_t page_size = 0;       // and page size
  int64_t window = 0;          // the cache's (the model's): which SWA pages it keeps
  int64_t timeout_ms = 30000;  // a transfer with no message from the prefill server this long fails
  int32_t vocab_size = 0;
  int64_t max_context = 0;  // 0 = none
};

/// Since start.
struct pd_decode_counters {
  int64_t transfers = 0;  // requests sent to the prefill server
  int64_t completed = 0;  // joined the running set
  int64_t failed = 0;     // ended with an error (timeouts among them)
  int64_t timed_out = 0;
  int64_t chunks = 0;               // kvChunk messages imported
  int64_t full_pages_imported = 0;  // full pages written by imports
  int64_t full_pages_cached = 0;    // full pages a decode-side prefix hit held (skipFull)
};

class pd_decode {
 public:
  pd_decode(pd_decode_params params, pd_decode_port* port) : params_(std::move(params)), port_(port) {}

  /// A new request (arrived now). One it cannot serve is published as a refused finish.
  void submit(sched::gen_request r);
  void on_reserved(const cache::prefill_reserved& g);
  /// A message from the prefill server.
  void on_message(const pd_link::pd_message& m);
  void on_imported(uint64_t transfer_id, const status& result);
  void on_timeout(uint64_t transfer_id, uint64_t generation);
  /// Ends request `id` if it is being handed off (finish abort published); false otherwise.
  bool abort(uint64_t request_id);
  void abort_all();

  int64_t n_transfers() const { return int64_t(transfers_.size()); }
  const pd_decode_counters& counters() const { return counters_; }

 private:
  struct transfer {
    uint64_t id = 0;
    sched::gen_request req;
    int64_t arrival_us = 0;
    bool reserving = true;  // waiting for the shard
    bool sent = false;      // the prefill message went out
    bool ended = false;     // finish published; cleaned up once quiet
    cache::request_id cache_id = -1;
    int64_t n_cached = 0, skip_full = 0;
    std::vector<int32_t> full, swa;
    int64_t pending = 0;   // imports sent, not answered
    int64_t imported = 0;  // imports done
    std::optional<pd_link::kv_done> done;
    uint64_t generation = 0;  // of the armed timeout
  };

  void arm(transfer& t);
  /// Publishes the request's end (refused error with `code`, or abort when
  /// `code` is cancelled), tells the prefill server (`why`) when it may hold
  /// pages, and cleans up when quiet.
  void fail(transfer& t, status_code code, std::string message,
            std::optional<pd_link::refuse_reason> why = pd_link::refuse_reason::aborted);
  void maybe_admit(transfer& t);
  /// Releases the pages and forgets `t` once it ended and nothing is pending.
  void cleanup(uint64_t transfer_id);

  pd_decode_params params_;
  pd_decode_port* port_;
  uint64_t next_transfer_ = 1;
  std::map<uint64_t, transfer> transfers_;   // by transfer id
  std::map<uint64_t, uint64_t> by_request_;  // request id -> transfer id, until it ends
  std::set<uint64_t> ended_;                 // transfer ids ended recently: their late messages are dropped
  std::deque<uint64_t> ended_order_;
  pd_decode_counters counters_;
};

}  // namespace hart::pd
