// File: runtime/cache/shard_protocol.h
// The cache shard's protocol: what a scheduler asks of the shard that owns a
// ShadowRadix index (one per attention data-parallel rank) and what it gets
// back. Plain values, so cache_shard answers them without CAF and the actors
// (actors/cache_shard_actor) only carry them.
//
// Per step, one slot_request -> one slot_grants: the step's running sequences
// best first (each a continuation; the same list, worst last, gives the
// preemption candidates) and the waiting ones best first (admissions). The
// shard reserves, preempts and admits in that order within the step's token
// budget and answers with its decisions in the order it made them. Between
// steps the scheduler sends cache_op_batch (advance / finish / abort / flush),
// which needs no answer: a sender's messages arrive in order, so a later
// slot_request sees them applied. Also between steps, reserve_request ->
// reserve_grants: pages ahead of need for decoding sequences about to cross
// into a new page, so the step that crosses needs no slot_request.
//
//   cache_shard shard(cfg);
//   shard.apply(ops);                     // what the last step computed
//   slot_grants g = shard.plan(request);  // pages for this step
//   reserve_grants r = shard.reserve(ahead);  // pages for the next few steps
#pragma once

#include "runtime/cache/shadow_radix.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hart::cache {

/// A running sequence (holding a cache request), as the step finds it.
struct slot_continuation {
  uint64_t seq = 0;    // the scheduler's key
  uint64_t order = 0;  // its place in the scheduler's priority order (both lists; smaller first)
  request_id cache_id = -1;
  int64_t n_computed = 0;   // positions with valid KV
  int64_t n_remaining = 0;  // tokens not computed yet (>= 1)
  /// Its tokens past those the cache request knows (a sampled token not fed
  /// yet): with them a sequence preempted in this step can be admitted again
  /// in the same step, at its place among the waiting ones.
  std::vector<int32_t> tail;
};

/// A waiting sequence (no cache request).
struct slot_admission {
  uint64_t seq = 0;
  uint64_t order = 0;  // as slot_continuation::order
  /// Its whole sequence so far (prompt, plus generated tokens after a
  /// preemption); immutable while it waits, so shared, not copied, per step.
  std::shared_ptr<const std::vector<int32_t>> tokens;
  /// Not 0: skipped (sample 1..n-1 waiting for sample 0's prompt, so it hits
  /// those pages) unless that sequence fails in this same request.
  uint64_t blocked_by = 0;
  /// false: admitted without a prefix hit (computed from position 0).
  bool match_prefix = true;
};

struct slot_request {
  uint64_t step = 0;
  int64_t budget = 0;                      // tokens this step feeds, all sequences together
  int64_t prefill_chunk = 0;               // most tokens of one sequence
  int64_t max_running = 0;                 // admissions stop when this many sequences run
  std::vector<slot_continuation> running;  // every running sequence, best first
  std::vector<slot_admission> waiting;     // best first
};

enum class slot_verdict {
  granted,    // feed n_tokens from n_computed; pages cover them
  preempted,  // its cache request was finished into the cache; it waits again
  failed,     // it can never be served (message); any cache request aborted
};

struct slot_decision {
  uint64_t seq = 0;
  slot_verdict verdict = slot_verdict::granted;
  bool admitted = false;      // granted from the waiting list (a new cache request)
  request_id cache_id = -1;   // granted
  int64_t n_computed = 0;     // granted: where it starts (an admission: its prefix hit)
  int64_t n_tokens = 0;       // granted: tokens fed this step
  std::vector<page_id> full;  // granted: the page tables (request_pages)
  std::vector<page_id> swa;
  std::string message;  // failed
};

struct slot_grants {
  uint64_t step = 0;
  std::vector<slot_decision> decisions;  // in the order they were made
};

/// One change to a cache request, or to the whole index (flush).
struct cache_op {
  enum class kind {
    advance,  // positions [0, n_computed) are computed; `appended` extends the known tokens
    finish,   // end it, caching what it computed up to n_computed (preemption too)
    abort,    // end it, caching nothing new
    flush,    // drop every unlocked cached page
  };
  kind op = kind::advance;
  request_id cache_id = -1;
  int64_t n_computed = 0;
  std::vector<int32_t> appended;  // advance only
};

using cache_op_batch = std::vector<cache_op>;

/// Pages ahead of need for a running sequence: its cache request gets pages
/// for positions [0, n_tokens) if the pools have them (free, or cached and
/// unlocked: evicted as a step's reservation would), never by preempting.
/// Pages it never computes are released with the request (finish, abort).
struct slot_reservation {
  uint64_t seq = 0;  // the scheduler's key
  request_id cache_id = -1;
  int64_t n_tokens = 0;
};

/// A reservation made: the request's page tables after it (request_pages).
struct slot_reserved {
  uint64_t seq = 0;
  request_id cache_id = -1;
  std::vector<page_id> full;
  std::vector<page_id> swa;
};

using reserve_request = std::vector<slot_reservation>;
/// The reservations the pools could serve; the others are left out, and the
/// step that needs their pages asks with its slot_request as before.
using reserve_grants = std::vector<slot_reserved>;

}  // namespace hart::cache

namespace hart::cache {

/// Pages for a sequence whose prompt's KV comes from outside (prefill/decode
/// disaggregation, docs/pd.md): a new cache request for `tokens` (its prefix
/// matched, as an admission's) with pages for positions [0, n_tokens) (the
/// prompt and the first decode step). Answered with prefill_reserved.
struct prefill_reservation {
  uint64_t key = 0;  // the caller's (a transfer id)
  std::shared_ptr<const std::vector<int32_t>> tokens;
  int64_t n_tokens = 0;
};

struct prefill_reserved {
  uint64_t key = 0;
  /// Not ok: nothing is held (resource_exhausted when the pools cannot serve it now).
  status result;
  request_id cache_id = -1;
  int64_t n_cached = 0;  // the prefix hit: positions [0, n_cached) hold valid KV already (page-aligned)
  std::vector<page_id> full;
  std::vector<page_id> swa;
};

}  // namespace hart::cache
