#include "rollout/rollout_client.h"

#include "runtime/protocol/routing_parts.h"
#include "runtime/protocol/validate.h"
#include "runtime/transport/client.h"

#include <deque>
#include <unordered_map>
#include <unordered_set>

namespace hart {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

status rollout_client_params::validate() const {
  if (endpoint.empty()) return invalid_argument("rollout_client: endpoint is empty");
  if (timeout.count() <= 0) return invalid_argument("rollout_client: timeout must be positive");
  if (max_in_flight == 0) return invalid_argument("rollout_client: max_in_flight must be >= 1");
  return {};
}

namespace {

/// One generate request on the wire: prompt `prompt` of batch `batch`.
struct request_state {
  uint64_t batch = 0;
  size_t prompt = 0;
  std::vector<uint32_t> next_seq;  ///< per sample: the chunk seq expected next
  std::vector<bool> done;          ///< per sample: final received
  uint32_t n_done = 0;
};

struct batch_state {
  std::vector<rollout_prompt> prompts;
  std::vector<uint64_t> request_ids;  ///< by prompt index
  rollout_result result;
  rollout_progress progress;
  size_t n_prompts_done = 0;
  status error;  ///< first refusal or protocol violation
  steady::time_point start = steady::now();
};

}  // namespace

struct rollout_client::impl {
  rollout_client_params params;
  std::unique_ptr<transport::client> conn;
  uint64_t next_request_id = 1;
  uint64_t next_batch = 1;
  uint64_t next_tag = 1;
  std::unordered_map<uint64_t, batch_state> batches;
  std::unordered_map<uint64_t, request_state> in_flight;  ///< by request id
  std::deque<std::pair<uint64_t, size_t>> queued;         ///< (batch, prompt) not yet sent
  /// Control replies by tag, parked until their caller picks them up.
  std::unordered_map<uint64_t, protocol::reply> control_replies;
  /// Tags of abort verbs whose replies nobody waits for.
  std::unordered_set<uint64_t> fire_and_forget;
  protocol::routing_assembler routing;  ///< routing parts waiting for their finals

  status send_queued() {
    while (!queued.empty() && in_flight.size() < params.max_in_flight) {
      auto [bid, pi] = queued.front();
      queued.pop_front();
      batch_state& b = batches.at(bid);
      protocol::generate_request g;
      g.request_id = next_request_id++;
      g.kind = protocol::prompt_kind::token_ids;
      g.token_ids = b.prompts[pi].token_ids;
      g.sampling = b.prompts[pi].sampling;
      g.sampling.logprobs = true;
      g.return_routing = b.prompts[pi].return_routing;
      g.return_indexer_picks = b.prompts[pi].return_indexer_picks;
      const uint32_t n = g.sampling.n;
      HART_RETURN_IF_ERROR(conn->send(protocol::request{g}));
      b.request_ids[pi] = g.request_id;
      in_flight[g.request_id] =
          request_state{bid, pi, std::vector<uint32_t>(n, 0), std::vector<bool>(n, false), 0};
    }
    return {};
  }

  void on_chunk(const protocol::chunk_event& c) {
    auto it = in_flight.find(c.request_id);
    if (it == in_flight.end()) return;  // a request this client no longer tracks
    request_state& r = it->second;
    batch_state& b = batches.at(r.batch);
    if (c.sample_index >= r.done.size() || r.done[c.sample_index]) {
      if (b.error.ok())
        b.error =
            invalid_argument("rollout: chunk for sample %u of request %llu out of range or after its final",
                             c.sample_index, (unsigned long long)c.request_id);
      return;
    }
    if (c.seq != r.next_seq[c.sample_index]) {
      if (b.error.ok())
        b.error =
            data_loss("rollout: request %llu sample %u: chunk seq %u, expected %u",
                      (unsigned long long)c.request_id, c.sample_index, c.seq, r.next_seq[c.sample_index]);
    }
    r.next_seq[c.sample_index] = c.seq + 1;
    if (!c.logprobs.empty() && c.logprobs.size() != c.token_ids.size() && b.error.ok()) {
      b.error = invalid_argument("rollout: request %llu chunk has %zu tokens but %zu log-probs",
                                 (unsigned long long)c.request_id, c.token_ids.size(), c.logprobs.size());
    }
    rollout_sample& s = b.result.groups[r.prompt].samples[c.sample_index];
    s.token_ids.insert(s.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
    s.logprobs.insert(s.logprobs.end(), c.logprobs.begin(), c.logprobs.end());
    s.weight_versions.insert(s.weight_versions.end(), c.token_ids.size(), c.weight_version);
    b.progress.n_tokens += int64_t(c.token_ids.size());
    b.result.n_tokens += int64_t(c.token_ids.size());
    b.progress.last_version = c.weight_version;
  }

  void on_routing_part(protocol::routing_part&& p) {
    auto it = in_flight.find(p.request_id);
    if (it == in_flight.end()) return;
    batch_state& b = batches.at(it->second.batch);
    const uint64_t id = p.request_id;
    if (status st = routing.add(std::move(p)); !st.ok() && b.error.ok()) {
      b.error = data_loss("rollout: request %llu: %s", (unsigned long long)id, st.message().c_str());
    }
  }

  void on_final(protocol::final_event& f) {
    auto it = in_flight.find(f.request_id);
    if (it == in_flight.end()) return;
    request_state& r = it->second;
    batch_state& b = batches.at(r.batch);
    if (status st = routing.complete(&f); !st.ok() && b.error.ok()) {
      b.error =
          data_loss("rollout: request %llu: %s", (unsigned long long)f.request_id, st.message().c_str());
    }
    if (f.sample_index >= r.done.size() || r.done[f.sample_index]) {
      if (b.error.ok())
        b.error = invalid_argument("rollout: final for sample %u of request %llu out of range or repeated",
                                   f.sample_index, (unsigned long long)f.request_id);
      return;
    }
    rollout_sample& s = b.result.groups[r.prompt].samples[f.sample_index];
    s.finish = f.reason;
    s.error_message = f.error_message;
    s.cached_tokens = f.usage.cached_tokens;
    s.routing = std::move(f.routing);
    r.done[f.sample_index] = true;
    ++b.progress.n_samples_done;
    if (++r.n_done == r.done.size()) {
      ++b.n_prompts_done;
      in_flight.erase(it);
    }
  }

  void on_error(const protocol::error_reply& e) {
    if (e.tag != 0) {
      if (fire_and_forget.erase(e.tag)) return;  // e.g. abort of a request that just finished
      control_replies[e.tag] = e;
      return;
    }
    auto it = in_flight.find(e.request_id);
    if (it == in_flight.end()) return;  // a refusal of something not ours
    request_state& r = it->second;
    batch_state& b = batches.at(r.batch);
    if (b.error.ok()) {
      b.error = status(e.code, "rollout: prompt " + std::to_string(r.prompt) + " (request " +
                                   std::to_string(e.request_id) + "): " + e.message);
    }
    // A refused request gets no chunks or finals: its samples end here.
    for (size_t i = 0; i < r.done.size(); ++i) {
      if (r.done[i]) continue;
      rollout_sample& s = b.result.groups[r.prompt].samples[i];
      s.finish = protocol::finish_reason::error;
      s.error_message = e.message;
      ++b.progress.n_samples_done;
    }
    ++b.n_prompts_done;
    in_flight.erase(it);
  }

  void dispatch(protocol::reply&& rep) {
    if (auto* c = std::get_if<protocol::chunk_event>(&rep)) return on_chunk(*c);
    if (auto* f = std::get_if<protocol::final_event>(&rep)) return on_final(*f);
    if (auto* p = std::get_if<protocol::routing_part>(&rep)) return on_routing_part(std::move(*p));
    if (auto* e = std::get_if<protocol::error_reply>(&rep)) return on_error(*e);
    uint64_t tag = 0;
    std::visit(
        [&](const auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (!std::is_same_v<T, protocol::chunk_event> &&
                        !std::is_same_v<T, protocol::final_event> &&
                        !std::is_same_v<T, protocol::routing_part>) {
            tag = r.tag;
          }
        },
        rep);
    if (fire_and_forget.erase(tag)) return;
    control_replies[tag] = std::move(rep);
  }

  /// Receives for up to `timeout` (one wait, then whatever is already queued).
  status pump(std::chrono::milliseconds timeout) {
    auto rep = conn->receive(timeout);
    if (!rep.ok()) return rep.get_status().code() == status_code::unavailable ? status{} : rep.get_status();
    dispatch(std::move(*rep));
    for (;;) {
      auto more = conn->receive(0ms);
      if (!more.ok()) break;
      dispatch(std::move(*more));
    }
    return send_queued();
  }

  status_or<protocol::reply> control(protocol::control_request c) {
    c.tag = next_tag++;
    HART_RETURN_IF_ERROR(conn->send(protocol::request{c}));
    const auto deadline = steady::now() + params.timeout;
    for (;;) {
      if (auto it = control_replies.find(c.tag); it != control_replies.end()) {
        protocol::reply r = std::move(it->second);
        control_replies.erase(it);
        if (auto* e = std::get_if<protocol::error_reply>(&r)) return status(e->code, e->message);
        return r;
      }
      if (steady::now() > deadline)
        return status(status_code::unavailable, "rollout: no reply to a control verb in time");
      HART_RETURN_IF_ERROR(pump(50ms));
    }
  }
};

rollout_client::rollout_client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
rollout_client::~rollout_client() = default;

status_or<std::unique_ptr<rollout_client>> rollout_client::connect(const rollout_client_params& params) {
  HART_RETURN_IF_ERROR(params.validate());
  auto p = std::make_unique<impl>();
  p->params = params;
  transport::client_params cp;
  cp.endpoint = params.endpoint;
  cp.curve_server_key = params.curve_server_key;
  cp.curve_secret_key = params.curve_secret_key;
  HART_ASSIGN_OR_RETURN(p->conn, transport::client::connect(cp));
  return std::unique_ptr<rollout_client>(new rollout_client(std::move(p)));
}

status_or<uint64_t> rollout_client::submit(const std::vector<rollout_prompt>& prompts) {
  if (prompts.empty()) return invalid_argument("rollout: empty batch");
  for (size_t i = 0; i < prompts.size(); ++i) {
    protocol::generate_request g;
    g.request_id = 1;
    g.token_ids = prompts[i].token_ids;
    g.sampling = prompts[i].sampling;
    if (status s = protocol::validate_generate(g); !s.ok()) {
      return status(s.code(), "rollout: prompt " + std::to_string(i) + ": " + s.message());
    }
  }
  const uint64_t id = impl_->next_batch++;
  batch_state& b = impl_->batches[id];
  b.prompts = prompts;
  b.request_ids.assign(prompts.size(), 0);
  b.result.groups.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    b.result.groups[i].samples.resize(prompts[i].sampling.n);
    b.progress.n_samples += prompts[i].sampling.n;
    impl_->queued.emplace_back(id, i);
  }
  HART_RETURN_IF_ERROR(impl_->send_queued());
  return id;
}

status rollout_client::poll(std::chrono::milliseconds timeout) {
  return impl_->pump(timeout);
}

status_or<rollout_progress> rollout_client::progress(uint64_t batch) const {
  auto it = impl_->batches.find(batch);
  if (it == impl_->batches.end()) return not_found("rollout: no batch %llu", (unsigned long long)batch);
  return it->second.progress;
}

status rollout_client::abort(uint64_t batch) {
  auto it = impl_->batches.find(batch);
  if (it == impl_->batches.end()) return not_found("rollout: no batch %llu", (unsigned long long)batch);
  batch_state& b = it->second;
  // Queued prompts never reach the server: they end here, without tokens.
  for (auto q = impl_->queued.begin(); q != impl_->queued.end();) {
    if (q->first != batch) {
      ++q;
      continue;
    }
    for (rollout_sample& s : b.result.groups[q->second].samples) s.finish = protocol::finish_reason::abort;
    b.progress.n_samples_done += int64_t(b.result.groups[q->second].samples.size());
    ++b.n_prompts_done;
    q = impl_->queued.erase(q);
  }
  for (const auto& [rid, r] : impl_->in_flight) {
    if (r.batch != batch) continue;
    protocol::control_request c;
    c.verb = protocol::control_verb::abort;
    c.request_id = rid;
    c.tag = impl_->next_tag++;
    impl_->fire_and_forget.insert(c.tag);
    HART_RETURN_IF_ERROR(impl_->conn->send(protocol::request{c}));
  }
  return {};
}

status_or<rollout_result> rollout_client::wait(uint64_t batch) {
  auto it = impl_->batches.find(batch);
  if (it == impl_->batches.end()) return not_found("rollout: no batch %llu", (unsigned long long)batch);
  const auto deadline = steady::now() + impl_->params.timeout;
  while (it->second.n_prompts_done < it->second.prompts.size()) {
    if (steady::now() > deadline) {
      return status(status_code::unavailable, "rollout: batch " + std::to_string(batch) +
                                                  " not complete after " +
                                                  std::to_string(impl_->params.timeout.count()) + " ms");
    }
    HART_RETURN_IF_ERROR(impl_->pump(100ms));
  }
  batch_state b = std::move(it->second);
  impl_->batches.erase(it);
  if (!b.error.ok()) return b.error;
  b.result.wall_s = std::chrono::duration<double>(steady::now() - b.start).count();
  return std::move(b.result);
}

status_or<rollout_result> rollout_client::generate(const std::vector<rollout_prompt>& prompts) {
  HART_ASSIGN_OR_RETURN(uint64_t id, submit(prompts));
  return wait(id);
}

status rollout_client::pause(protocol::pause_mode mode) {
  protocol::control_request c;
  c.verb = protocol::control_verb::pause;
  c.mode = mode;
  return impl_->control(c).get_status();
}

status rollout_client::resume() {
  protocol::control_request c;
  c.verb = protocol::control_verb::resume;
  return impl_->control(c).get_status();
}

status rollout_client::flush_cache() {
  protocol::control_request c;
  c.verb = protocol::control_verb::flush_cache;
  return impl_->control(c).get_status();
}

status_or<uint64_t> rollout_client::weight_version() {
  protocol::control_request c;
  c.verb = protocol::control_verb::weight_version;
  HART_ASSIGN_OR_RETURN(protocol::reply r, impl_->control(c));
  auto* v = std::get_if<protocol::weight_version_reply>(&r);
  if (!v) return internal_error("rollout: weightVersion answered with another reply kind");
  return v->version;
}

}  // namespace hart
