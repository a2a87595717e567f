#include "runtime/pd/pd_decode.h"

#include "runtime/core/log.h"
#include "runtime/pd/link_socket.h"

#include <algorithm>
#include <utility>

namespace hart::pd {
namespace {

using namespace hart::pd_link;

// Ended transfers remembered, so that their late chunks are dropped quietly.
constexpr size_t k_ended_kept = 4096;

status_code code_of(refuse_reason r) {
  return r == refuse_reason::layout_mismatch ? status_code::failed_precondition : status_code::unavailable;
}

}  // namespace

void pd_decode::submit(sched::gen_request r) {
  status st = r.validate(params_.vocab_size, params_.max_context);
  if (st.ok()) st = sched::prefilled_supported(r);
  if (st.ok() && by_request_.count(r.id))
    st = failed_precondition("request %llu is still live", (unsigned long long)r.id);
  if (!st.ok()) {
    sched::event_batch ev;
    sched::finish_event f;
    f.request_id = r.id;
    f.reason = sched::finish_reason::error;
    f.message = st.message();
    f.refused = true;
    f.code = st.code();
    f.prompt_tokens = int64_t(r.prompt.size());
    ev.finishes.push_back(std::move(f));
    port_->publish(std::move(ev));
    return;
  }
  transfer t;
  t.id = next_transfer_++;
  t.arrival_us = port_->now_us();
  const int64_t n = int64_t(r.prompt.size());
  cache::prefill_reservation res;
  res.key = t.id;
  res.tokens = std::make_shared<const std::vector<int32_t>>(r.prompt);
  res.n_tokens = n + 1;  // the prompt and the first decode step
  t.req = std::move(r);
  by_request_[t.req.id] = t.id;
  transfers_.emplace(t.id, std::move(t));
  port_->reserve(std::move(res));
}

void pd_decode::arm(transfer& t) {
  port_->wake_after(t.id, ++t.generation, std::chrono::milliseconds(params_.timeout_ms));
}

void pd_decode::on_reserved(const cache::prefill_reserved& g) {
  auto it = transfers_.find(g.key);
  if (it == transfers_.end()) {  // cannot happen: a reserving transfer is kept
    if (g.result.ok()) port_->release(g.cache_id);
    return;
  }
  transfer& t = it->second;
  t.reserving = false;
  if (g.result.ok()) {
    t.cache_id = g.cache_id;
    t.n_cached = g.n_cached;
    t.full = g.full;
    t.swa = g.swa;
  }
  if (t.ended) {  // aborted while the shard reserved
    cleanup(t.id);
    return;
  }
  if (!g.result.ok()) {
    fail(t, g.result.code(), "no KV pages for the prompt on the decode server: " + g.result.message(),
         std::nullopt);
    return;
  }
  t.skip_full = t.n_cached / params_.page_size;
  prefill_request p;
  p.tokens = t.req.prompt;
  p.sampling = link_sampling(t.req);
  p.skip_full = t.skip_full;
  p.layout = params_.layout;
  p.page_size = params_.page_size;
  port_->send({t.req.id, t.id, std::move(p)});
  t.sent = true;
  ++counters_.transfers;
  counters_.full_pages_cached += t.skip_full;
  arm(t);
}

void pd_decode::on_message(const pd_message& m) {
  auto it = transfers_.find(m.transfer_id);
  if (it == transfers_.end() || it->second.req.id != m.request_id || it->second.ended) {
    const bool answer = !std::holds_alternative<kv_refuse>(m.body) && !std::holds_alternative<kv_ack>(m.body);
    if (answer && !ended_.count(m.transfer_id) && it == transfers_.end()) {
      port_->send({m.request_id, m.transfer_id,
                   kv_refuse{refuse_reason::unknown_transfer,
                             "no transfer " + std::to_string(m.transfer_id) + " is expected"}});
    }
    return;
  }
  transfer& t = it->second;
  arm(t);
  if (const auto* c = std::get_if<kv_chunk>(&m.body)) {
    if (t.done) {
      fail(t, status_code::internal, "the prefill server sent a chunk after kvDone",
           refuse_reason::bad_chunk);
      return;
    }
    if (c->kv.layout != params_.layout || c->kv.page_size != params_.page_size) {
      fail(t, status_code::failed_precondition,
           "the prefill server's pages are laid out for another model or page size",
           refuse_reason::layout_mismatch);
      return;
    }
    if (c->kv.n_tokens != int64_t(t.req.prompt.size()) || c->kv.first_full != t.skip_full) {
      fail(t, status_code::internal,
           "the prefill server sent a chunk of " + std::to_string(c->kv.n_tokens) +
               " positions from full page " + std::to_string(c->kv.first_full) + " for a prompt of " +
               std::to_string(t.req.prompt.size()) + " from page " + std::to_string(t.skip_full),
           refuse_reason::bad_chunk);
      return;
    }
    // Every SWA page this side's cache keeps must be written: it is cached with
    // the prompt, and a later prefix hit reads it.
    cache::cache_config cc;
    cc.page_size = params_.page_size;
    cc.window = params_.window;
    if (c->kv.first_swa > std::max(t.skip_full, cc.first_live_swa_page(c->kv.n_tokens))) {
      fail(t, status_code::internal,
           "the prefill server sent SWA pages from " + std::to_string(c->kv.first_swa) +
               " on; this cache keeps them from " + std::to_string(cc.first_live_swa_page(c->kv.n_tokens)),
           refuse_reason::bad_chunk);
      return;
    }
    auto imp = std::make_shared<kv_import>();
    imp->transfer_id = t.id;
    imp->kv = c->kv;
    if (status st = kv_pages_drop_swa_below(imp->kv, t.skip_full); !st.ok()) {
      fail(t, status_code::internal, "a bad chunk from the prefill server: " + st.message(),
           refuse_reason::bad_chunk);
      return;
    }
    imp->full = t.full;
    imp->swa = t.swa;
    counters_.full_pages_imported += imp->kv.n_full_carried();
    ++t.pending;
    port_->import(std::move(imp));
  } else if (const auto* d = std::get_if<kv_done>(&m.body)) {
    if (t.done) {
      fail(t, status_code::internal, "the prefill server sent kvDone twice", refuse_reason::bad_chunk);
      return;
    }
    t.done = *d;
    maybe_admit(t);
  } else if (const auto* r = std::get_if<kv_refuse>(&m.body)) {
    fail(t, code_of(r->reason),
         std::string("the prefill server refused it (") + refuse_reason_name(r->reason) + "): " + r->message,
         std::nullopt);
  } else {
    fail(t, status_code::internal, "the prefill server sent an unexpected message", refuse_reason::bad_chunk);
  }
}

void pd_decode::on_imported(uint64_t transfer_id, const status& result) {
  auto it = transfers_.find(transfer_id);
  if (it == transfers_.end()) return;
  transfer& t = it->second;
  --t.pending;
  if (t.ended) {
    cleanup(t.id);
    return;
  }
  if (!result.ok()) {
    fail(t, status_code::internal, "a chunk from the prefill server did not import: " + result.message(),
         refuse_reason::bad_chunk);
    return;
  }
  ++t.imported;
  ++counters_.chunks;
  maybe_admit(t);
}

void pd_decode::maybe_admit(transfer& t) {
  if (!t.done || t.pending > 0) return;
  if (int64_t(t.done->n_chunks) != t.imported) {
    fail(t, status_code::internal,
         "the prefill server sent " + std::to_string(t.done->n_chunks) + " chunks, " +
             std::to_string(t.imported) + " arrived",
         refuse_reason::bad_chunk);
    return;
  }
  sched::prefilled p;
  p.cache_id = t.cache_id;
  p.n_cached = t.n_cached;
  p.full = t.full;
  p.swa = t.swa;
  p.first.token = t.done->first_token;
  p.first.logprob = t.done->first_logprob;
  for (const protocol::token_logprob& x : t.done->first_top_logprobs)
    p.first.top_logprobs.push_back({int32_t(x.token_id), x.logprob});
  p.arrival_us = t.arrival_us;
  const uint64_t rid = t.req.id, tid = t.id;
  if (status st = port_->admit(t.req, p); !st.ok()) {
    fail(t, st.code(), "the sequence could not join the running set: " + st.message());
    return;
  }
  port_->send({rid, tid, kv_ack{}});
  ++counters_.completed;
  // The scheduler owns the cache request now.
  by_request_.erase(rid);
  transfers_.erase(tid);
}

void pd_decode::fail(transfer& t, status_code code, std::string message, std::optional<refuse_reason> why) {
  if (t.ended) return;
  t.ended = true;
  const bool aborted = code == status_code::cancelled;
  if (!aborted) {
    ++counters_.failed;
    HART_LOG_WARN("request %llu: prefill/decode hand-off failed: %s", (unsigned long long)t.req.id,
                  message.c_str());
  }
  if (why && t.sent) port_->send({t.req.id, t.id, kv_refuse{*why, message}});
  sched::event_batch ev;
  sched::finish_event f;
  f.request_id = t.req.id;
  f.reason = aborted ? sched::finish_reason::abort : sched::finish_reason::error;
  f.message = aborted ? "aborted" : "prefill server " + params_.endpoint + ": " + message;
  f.refused = !aborted;
  f.code = code;
  f.prompt_tokens = int64_t(t.req.prompt.size());
  f.total_us = port_->now_us() - t.arrival_us;
  f.queued_us = f.total_us;
  ev.finishes.push_back(std::move(f));
  by_request_.erase(t.req.id);
  const uint64_t tid = t.id;
  port_->publish(std::move(ev));
  cleanup(tid);
}

void pd_decode::cleanup(uint64_t transfer_id) {
  auto it = transfers_.find(transfer_id);
  if (it == transfers_.end()) return;
  const transfer& t = it->second;
  if (!t.ended || t.reserving || t.pending > 0) return;
  if (t.cache_id >= 0) port_->release(t.cache_id);
  ended_.insert(transfer_id);
  ended_order_.push_back(transfer_id);
  if (ended_order_.size() > k_ended_kept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  transfers_.erase(it);
}

void pd_decode::on_timeout(uint64_t transfer_id, uint64_t generation) {
  auto it = transfers_.find(transfer_id);
  if (it == transfers_.end() || it->second.ended || it->second.generation != generation) return;
  ++counters_.timed_out;
  fail(it->second, status_code::unavailable,
       "no answer within " + std::to_string(params_.timeout_ms) +
           " ms (not running, or too slow: " + "--prefill-timeout-ms)");
}

bool pd_decode::abort(uint64_t request_id) {
  auto it = by_request_.find(request_id);
  if (it == by_request_.end()) return false;
  fail(transfers_.at(it->second), status_code::cancelled, "aborted by the client");
  return true;
}

void pd_decode::abort_all() {
  std::vector<uint64_t> ids;
  for (const auto& [rid, tid] : by_request_) ids.push_back(rid);
  for (uint64_t id : ids) abort(id);
}

}  // namespace hart::pd
