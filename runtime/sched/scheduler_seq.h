// File: runtime/sched/scheduler_seq.h — private to the scheduler's sources
// (scheduler.cpp: requests and outcomes; scheduler_plan.cpp: planning a step):
// what it keeps per request and per sequence.
#pragma once

#include "runtime/sched/scheduler.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace hart::sched {

struct scheduler::request_rec {
  gen_request req;
  int64_t arrival_us = 0;
  std::vector<uint64_t> seq_ids;  // by sample; 0 once that sample ended
  int32_t live = 0;
};

struct scheduler::seq {
  seq(std::shared_ptr<request_rec> r, const tokenizer* tok, int32_t eos)
      : req(std::move(r)), stop(req->req, tok, eos) {}

  uint64_t id = 0;
  std::shared_ptr<request_rec> req;
  int32_t sample = 0;
  std::vector<int32_t> tokens;    // prompt + generated; the last one is not computed yet once decoding
  std::vector<int32_t> drafts;    // speculative decoding: proposed for the step being planned
  std::vector<int32_t> mtp_next;  // the drafts the worker's MTP block made in the last step
  /// While waiting: `tokens` as the shard's admission will see them (shared
  /// by a request's samples, and across steps).
  std::shared_ptr<const std::vector<int32_t>> waiting_tokens;
  int64_t n_prompt = 0;
  int64_t n_computed = 0;  // mirrors the cache request's n_computed while running
  cache::request_id cache_id = -1;
  bool has_cache = false;
  /// The cache request's page tables as last granted, SWA entries that left
  /// the window dropped (request_pages), and the tokens it knows.
  std::vector<cache::page_id> full_pages, swa_pages;
  int64_t n_known = 0;
  int64_t pages_asked = 0;  // the page count last asked for ahead of need (reserve_ahead)
  bool running = false;
  bool prompt_done = false;  // the prompt was computed once (its pages are in the cache)
  int in_flight = 0;         // plans in flight that feed it (2 while a step is planned ahead)
  bool ended = false;        // finish event sent while in flight; cleaned up in complete()
  bool retract_pending = false;
  int64_t cached_tokens = -1;  // prefix hit at first admission
  uint64_t ticket = 0;
  int64_t first_sched_us = -1, first_token_us = -1;
  stop_rules stop;
  routing_trace routing;               // return_routing: what the worker reported, by position
  std::vector<float> prompt_logprobs;  // logprob_start >= 0: by prompt position (NaN until computed)
};

}  // namespace hart::sched
