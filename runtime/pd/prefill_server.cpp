#include "runtime/pd/prefill_server.h"

#include "runtime/core/log.h"
#include "runtime/model/kv_transfer.h"
#include "runtime/pd/link_socket.h"
#include "runtime/pd_link/pd_codec.h"
#include "runtime/worker/engine_executor.h"

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

namespace hart::pd {
namespace {

using namespace hart::pd_link;

// How often the thread looks at its stop flag and its held transfers' deadlines, at most.
constexpr int64_t k_poll_ms = 100;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A transfer whose pages wait for the decode side's answer: by (peer, request, transfer).
using held_key = std::tuple<std::string, uint64_t, uint64_t>;
struct held_transfer {
  cache::request_id cache_id = -1;
  std::vector<int32_t> tokens;  // the prompt: what its pages cache
  int64_t deadline_us = 0;
};

}  // namespace

struct prefill_server::impl {
  impl(const engine& e, prefill_server_params p) : eng(e), params(std::move(p)), index(params.cache) {}

  const engine& eng;
  const prefill_server_params params;
  zmq::context_t ctx;
  zmq::socket_t router;
  std::string endpoint;
  std::unique_ptr<worker::engine_executor> executor;  // the engine over this server's pages
  /// The pages' index (prefix cache), the held transfers and the counters: the
  /// thread holds `mu` while it handles a message, state() to read them.
  mutable std::mutex mu;
  cache::shadow_radix index;
  std::map<held_key, held_transfer> held;
  prefill_server_state counts;
  uint64_t next_step = 1;
  std::atomic<bool> stop{false};
  std::thread thread;

  void run() {
    while (!stop.load()) {
      int64_t wait_ms = k_poll_ms;
      {
        std::lock_guard<std::mutex> lock(mu);
        expire();
        const int64_t now = now_us();
        for (const auto& [key, h] : held)
          wait_ms = std::min(wait_ms, std::max<int64_t>(0, (h.deadline_us - now) / 1000 + 1));
      }
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms)) <= 0) continue;
      zmq::message_t peer, frame;
      if (!router.recv(peer, zmq::recv_flags::dontwait)) continue;
      if (!peer.more() || !router.recv(frame, zmq::recv_flags::dontwait)) continue;
      while (frame.more()) {  // a malformed message: drop its extra parts
        zmq::message_t extra;
        if (!router.recv(extra, zmq::recv_flags::dontwait)) break;
        frame.swap(extra);
      }
      std::lock_guard<std::mutex> lock(mu);
      on_frame(peer, frame);
    }
  }

  void on_frame(const zmq::message_t& peer, const zmq::message_t& frame) {
    status_or<pd_message> m = pd_link::decode(frame.data(), frame.size());
    if (!m.ok()) {
      HART_LOG_WARN("prefill server: a frame it cannot read: %s", m.get_status().to_string().c_str());
      return;
    }
    if (const auto* p = std::get_if<prefill_request>(&m->body)) {
      prefill(peer, *m, *p);
      return;
    }
    const bool ack = std::holds_alternative<kv_ack>(m->body);
    const auto* refuse = std::get_if<kv_refuse>(&m->body);
    if (!ack && !refuse) {
      HART_LOG_WARN("prefill server: request %llu: unexpected message kind %zu",
                    (unsigned long long)m->request_id, m->body.index());
      return;
    }
    auto it = held.find({peer.to_string(), m->request_id, m->transfer_id});
    if (it == held.end()) return;  // answered already, or expired
    if (refuse) {
      HART_LOG_WARN("prefill server: request %llu refused by the decode side (%s): %s",
                    (unsigned long long)m->request_id, refuse_reason_name(refuse->reason),
                    refuse->message.c_str());
    }
    release(it, ack ? &prefill_server_state::acked : &prefill_server_state::refused);
  }

  /// Ends a held transfer: its pages go to the prefix cache.
  void release(std::map<held_key, held_transfer>::iterator it, int64_t prefill_server_state::*counter) {
    const status st = index.finish(it->second.cache_id, it->second.tokens);
    if (!st.ok()) HART_LOG_ERROR("prefill server: finish: %s", st.to_string().c_str());
    held.erase(it);
    ++(counts.*counter);
  }

  void expire() {
    const int64_t now = now_us();
    for (auto it = held.begin(); it != held.end();) {
      auto next = std::next(it);
      if (now >= it->second.deadline_us) {
        HART_LOG_WARN(
            "prefill server: request %llu: no answer from the decode side within %lld ms; its "
            "pages go to the prefix cache",
            (unsigned long long)std::get<1>(it->first), (long long)params.ack_timeout_ms);
        release(it, &prefill_server_state::timed_out);
      }
      it = next;
    }
  }

  void answer_refuse(const zmq::message_t& peer, const pd_message& m, refuse_reason why,
                     std::string message) {
    HART_LOG_WARN("prefill server: request %llu refused (%s): %s", (unsigned long long)m.request_id,
                  refuse_reason_name(why), message.c_str());
    if (message.size() > max_refuse_message_bytes) message.resize(max_refuse_message_bytes);
    ++counts.refused;
    (void)link_send(router, &peer, {m.request_id, m.transfer_id, kv_refuse{why, std::move(message)}});
  }

  void prefill(const zmq::message_t& peer, const pd_message& m, const prefill_request& p) {
    const kv_store& store = *executor->cpu_store();
    const int64_t n = int64_t(p.tokens.size());
    const int64_t P = store.page_size();
    if (p.layout != store.layout_id() || p.page_size != P) {
      answer_refuse(peer, m, refuse_reason::layout_mismatch,
                    "the decode side's pages are laid out for another model or page size (page size " +
                        std::to_string(p.page_size) + ", this server " + std::to_string(P) + ")");
      return;
    }
    if (p.skip_full >= (n + P - 1) / P) {
      answer_refuse(peer, m, refuse_reason::bad_chunk,
                    "skipFull " + std::to_string(p.skip_full) + " leaves no page of " + std::to_string(n) +
                        " positions to send");
      return;
    }
    sched::gen_request g = link_request(p);
    if (status st = g.validate(params.vocab_size); !st.ok()) {
      answer_refuse(peer, m, refuse_reason::bad_chunk, st.message());
      return;
    }
    status_or<cache::request_id> id = index.admit(p.tokens);
    if (!id.ok()) {
      answer_refuse(peer, m, refuse_reason::aborted, id.get_status().to_string());
      return;
    }
    if (status st = index.reserve(*id, n); !st.ok()) {
      (void)index.abort(*id);
      answer_refuse(peer, m, refuse_reason::aborted, "prefill server: " + st.to_string());
      return;
    }
    status_or<sched::sampled_token> first = compute(m.request_id, g, *id);
    if (!first.ok()) {
      (void)index.abort(*id);
      answer_refuse(peer, m, refuse_reason::aborted, "prefill server: " + first.get_status().to_string());
      return;
    }
    held_key key{peer.to_string(), m.request_id, m.transfer_id};
    auto it = held.emplace(key, held_transfer{*id, p.tokens, 0}).first;
    ++counts.prefills;
    const status sent = send_kv(peer, m, p, *id, *first);
    it->second.deadline_us = now_us() + params.ack_timeout_ms * 1000;
    if (!sent.ok()) {
      HART_LOG_WARN("prefill server: request %llu: %s", (unsigned long long)m.request_id,
                    sent.to_string().c_str());
      release(it, &prefill_server_state::refused);
    }
  }

  /// Computes the prompt of cache request `id` from its prefix hit on, in
  /// chunks, as the scheduler's steps would; the first token sampled from its
  /// last logits.
  status_or<sched::sampled_token> compute(uint64_t request_id, const sched::gen_request& g,
                                          cache::request_id id) {
    const int64_t n = int64_t(g.prompt.size());
    int64_t done = index.pages(id).n_computed;
    sched::sampled_token first;
    while (done < n) {
      const int64_t end = std::min(done + params.prefill_chunk, n);
      sched::step_plan plan;
      plan.step = next_step++;
      sched::step_item it;
      it.seq_id = 1;
      it.request_id = request_id;
      it.tokens.assign(g.prompt.begin() + done, g.prompt.begin() + end);
      it.full_pages = index.pages(id).full;
      it.swa_pages = index.pages(id).swa;
      it.n_computed = done;
      it.sample_last = end == n;
      it.sampling = g.sampling(0);
      it.sampling.seed = sched::step_seed(it.sampling.seed, 0);
      it.logprobs = g.logprobs;
      it.top_logprobs = g.top_logprobs;
      plan.items.push_back(std::move(it));
      HART_ASSIGN_OR_RETURN(sched::step_result r, executor->execute(plan));
      HART_RETURN_IF_ERROR(r.error);
      HART_RETURN_IF_ERROR(index.advance(id, std::vector<int32_t>(g.prompt.begin(), g.prompt.begin() + end)));
      if (end == n) {
        if (r.sampled.size() != 1)
          return internal_error("the last chunk sampled %zu tokens", r.sampled.size());
        first = std::move(r.sampled[0]);
      }
      done = end;
    }
    return first;
  }

  status send_kv(const zmq::message_t& peer, const pd_message& m, const prefill_request& p,
                 cache::request_id id, const sched::sampled_token& first) {
    const kv_store& store = *executor->cpu_store();
    const int64_t n = int64_t(p.tokens.size());
    page_table pages;
    pages.full = index.pages(id).full;
    pages.swa = index.pages(id).swa;
    // Every SWA page the decode side's cache keeps (the same rule as this
    // server's), not only those a decode step reads: it caches them with the
    // prompt, and a later prefix hit there reads them as its own.
    const int64_t first_swa = params.cache.first_live_swa_page(n);
    HART_ASSIGN_OR_RETURN(
        std::vector<kv_page_range> ranges,
        kv_pages_plan(store, eng.config(), n, p.skip_full, params.max_chunk_bytes, first_swa));
    for (const kv_page_range& r : ranges) {
      HART_ASSIGN_OR_RETURN(kv_pages kv,
                            kv_pages_export(store, eng.config(), pages, n, p.skip_full, r, first_swa));
      counts.full_pages_sent += kv.n_full_carried();
      HART_RETURN_IF_ERROR(link_send(router, &peer, {m.request_id, m.transfer_id, kv_chunk{std::move(kv)}}));
      ++counts.chunks_sent;
    }
    kv_done done;
    done.first_token = first.token;
    done.first_logprob = first.logprob;
    done.n_chunks = uint32_t(ranges.size());
    for (const sched::token_logprob& t : first.top_logprobs)
      done.first_top_logprobs.push_back({uint32_t(t.token), t.logprob});
    return link_send(router, &peer, {m.request_id, m.transfer_id, std::move(done)});
  }
};

status_or<std::unique_ptr<prefill_server>> prefill_server::start(const engine& eng,
                                                                 prefill_server_params params) {
  HART_RETURN_IF_ERROR(params.cache.validate());
  if (params.prefill_chunk < 1)
    return invalid_argument("prefill server: prefill_chunk %lld < 1", (long long)params.prefill_chunk);
  if (params.ack_timeout_ms < 1)
    return invalid_argument("prefill server: ack timeout %lld ms < 1", (long long)params.ack_timeout_ms);
  if (params.vocab_size <= 0) params.vocab_size = int32_t(eng.config().vocab_size);
  auto p = std::make_unique<impl>(eng, std::move(params));
  HART_ASSIGN_OR_RETURN(p->executor, worker::engine_executor::on_cpu(eng, p->params.cache));
  try {
    p->router = link_socket(p->ctx, zmq::socket_type::router);
    p->router.bind(p->params.endpoint);
    p->endpoint = p->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("prefill server: cannot bind %s: %s", p->params.endpoint.c_str(), e.what());
  }
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<prefill_server>(new prefill_server(std::move(p)));
}

prefill_server::prefill_server(std::unique_ptr<impl> p) : p_(std::move(p)) {}

prefill_server::~prefill_server() {
  p_->stop.store(true);
  if (p_->thread.joinable()) p_->thread.join();
}

std::string prefill_server::endpoint() const {
  return p_->endpoint;
}

prefill_server_state prefill_server::state() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  prefill_server_state s = p_->counts;
  s.cache = p_->index.metrics();
  s.check = p_->index.check();
  s.held = int64_t(p_->held.size());
  return s;
}

}  // namespace hart::pd
