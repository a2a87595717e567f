#include "actors/gateway_actor.h"

#include "actors/chat_sessions.h"
#include "actors/request_convert.h"
#include "runtime/core/log.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace hart::actors {
namespace {

// Chat sessions remembered for prefix reuse, and their token ids in all (128 MiB of ids; the
// least recently used beyond either bound are forgotten).
constexpr size_t k_max_chat_sessions = 4096;
constexpr size_t k_max_chat_session_tokens = size_t(1) << 25;

// One live generation, as its client sees it.
struct live_generation {
  transport::client_id client;
  uint64_t client_request_id = 0;
  std::vector<uint32_t> next_seq;  // per sample
  int32_t remaining = 0;           // samples without a final yet
  int64_t prompt_tokens = 0;
  // A chat turn with a session id (chat_sessions): what the session remembers once it ends.
  std::string session;
  std::vector<protocol::chat_message> messages;
  std::vector<int32_t> prompt, answer_ids;
  std::string answer_text;
  bool logprobs = false;
  bool top_logprobs = false;
};

struct gateway_state;
using gateway_self = gateway_actor::stateful_pointer<gateway_state>;

struct gateway_state {
  gateway_params params;
  uint64_t next_id = 1;
  std::map<uint64_t, live_generation> live;  // internal id → generation
  std::map<std::pair<transport::client_id, uint64_t>, uint64_t>
      by_client_id;                                         // (client, its id) → internal id
  std::map<transport::client_id, int64_t> live_per_client;  // clients with live generations only
  int64_t live_prompt_tokens = 0;
  uint64_t refused_limits = 0;  // generates refused by an admission limit
  std::unique_ptr<chat_sessions> sessions;
  /// HTTP exchanges by client id: weak, so an exchange that ended (its client gone) takes its
  /// queue with it and later replies for it are dropped. Their ids cannot be a ZeroMQ peer's
  /// (runtime/http/exchange.h); a reply for an id not here goes to the ZeroMQ server.
  std::map<transport::client_id, std::weak_ptr<http::reply_queue>> local;
  size_t local_swept = 0;  // local.size() after the last sweep of expired exchanges

  void send(const transport::client_id& client, const protocol::reply& r) {
    if (auto it = local.find(client); it != local.end()) {
      std::shared_ptr<http::reply_queue> q = it->second.lock();
      if (!q) return;  // the exchange ended: nobody waits for this (register_local sweeps it)
      if (!q->push(r)) HART_LOG_WARN("reply to an HTTP exchange dropped: its queue is full");
      return;
    }
    status s = params.server->send(client, r);
    if (!s.ok()) HART_LOG_WARN("reply to a client dropped: %s", s.to_string().c_str());
  }

  /// The scheduler's stats plus what only the gateway and the socket know: admission (live
  /// generations, their prompt tokens, refusals), slow readers and the replies they or
  /// vanished clients did not get, and CURVE handshakes the allowlist refused.
  protocol::stats_reply with_gateway_stats(protocol::stats_reply st) const {
    const transport::server_counters c = params.server->counters();
    for (const auto& [name, value] : {std::pair<const char*, uint64_t>{"live_requests", live.size()},
                                      {"live_prompt_tokens", uint64_t(live_prompt_tokens)},
                                      {"requests_refused_limits", refused_limits},
                                      {"slow_clients", c.slow_clients},
                                      {"replies_dropped_slow", c.stalled},
                                      {"replies_unroutable", c.unroutable},
                                      {"auth_refused", c.auth_refused},
                                      {"connections", uint64_t(c.connections)},
                                      {"connections_refused", c.connections_refused},
                                      {"client_disconnects", c.disconnects}}) {
      st.entries.emplace_back(name, double(value));
      st.prometheus += std::string("hart_") + name + ' ' + std::to_string(value) + '\n';
    }
    return st;
  }

  /// Remembers where an HTTP exchange's replies go; drops expired ones now and then (amortized).
  void register_local(const transport::client_id& client, const std::shared_ptr<http::reply_queue>& q) {
    local[client] = q;
    if (local.size() < 2 * local_swept + 64) return;
    for (auto it = local.begin(); it != local.end();)
      it = it->second.expired() ? local.erase(it) : std::next(it);
    local_swept = local.size();
  }

  void on_generate(gateway_self self, const transport::client_id& client,
                   const protocol::generate_request& g) {
    const auto key = std::make_pair(client, g.request_id);
    if (by_client_id.count(key)) {
      send(client, protocol::error_reply_from(invalid_argument("request id %llu is already running",
                                                               (unsigned long long)g.request_id),
                                              g.request_id));
      return;
    }
    const uint64_t id = next_id++;
    // A chat turn that continues its session's last one keeps that turn's token ids. Only in chat
    // mode: in thinking mode DeepSeek-V4's encoding drops the earlier answers' reasoning, so the
    // kept ids would not be what the template writes.
    const bool chat_turn = !g.session_id.empty() && g.kind == protocol::prompt_kind::messages &&
                           g.sampling.n == 1 && !g.thinking;
    std::optional<std::vector<int32_t>> continued;
    if (chat_turn) {
      auto c = sessions->continuation(g.session_id, g.messages);
      if (!c.ok()) {
        send(client, protocol::error_reply_from(c.get_status(), g.request_id));
        return;
      }
      continued = std::move(*c);
    }
    auto r = continued ? to_gen_request(with_token_ids(g, *continued), id, params.tok, params.vocab_size,
                                        params.max_context)
                       : to_gen_request(g, id, params.tok, params.vocab_size, params.max_context);
    if (!r.ok()) {
      send(client, protocol::error_reply_from(r.get_status(), g.request_id));
      return;
    }
    r->client = std::hash<transport::client_id>{}(client) |
                1;  // the scheduler's turns are per connection; 0 is "shared"
    const int64_t prompt_tokens = int64_t(r->prompt.size());
    if (status st = admit(client, prompt_tokens); !st.ok()) {
      ++refused_limits;
      send(client, protocol::error_reply_from(st, g.request_id));
      return;
    }
    ++live_per_client[client];
    live_prompt_tokens += prompt_tokens;
    live_generation lg;
    lg.prompt_tokens = prompt_tokens;
    if (chat_turn) {
      lg.session = g.session_id;
      lg.messages = g.messages;
      lg.prompt = r->prompt;
    }
    lg.client = client;
    lg.client_request_id = g.request_id;
    lg.next_seq.assign(std::max<uint32_t>(1, g.sampling.n), 0);
    lg.remaining = int32_t(lg.next_seq.size());
    lg.logprobs = g.sampling.logprobs;
    lg.top_logprobs = g.sampling.top_logprobs > 0;
    live.emplace(id, std::move(lg));
    by_client_id.emplace(key, id);
    self->send(params.scheduler, submit_atom::value,
               std::make_shared<const submit_request>(submit_request{std::move(r).value()}));
  }

  /// The admission limits (gateway_params) for one more generation of `prompt_tokens`.
  status admit(const transport::client_id& client, int64_t prompt_tokens) const {
    if (params.max_requests > 0 && int64_t(live.size()) >= params.max_requests) {
      return resource_exhausted(
          "%zu generations are in flight, the server's limit (--max-requests %lld); retry later", live.size(),
          (long long)params.max_requests);
    }
    if (params.max_requests_per_client > 0) {
      const auto it = live_per_client.find(client);
      if (it != live_per_client.end() && it->second >= params.max_requests_per_client) {
        return resource_exhausted(
            "this client has %lld generations in flight, the limit per client "
            "(--max-requests-per-client %lld); retry when one ends",
            (long long)it->second, (long long)params.max_requests_per_client);
      }
    }
    if (params.max_prompt_tokens > 0 && live_prompt_tokens + prompt_tokens > params.max_prompt_tokens) {
      return resource_exhausted(
          "%lld prompt tokens are in flight and this prompt has %lld, over the limit "
          "(--max-prompt-tokens %lld); retry later",
          (long long)live_prompt_tokens, (long long)prompt_tokens, (long long)params.max_prompt_tokens);
    }
    return {};
  }

  void on_control(gateway_self self, const transport::client_id& client, const protocol::control_request& c,
                  bool from_server) {
    control_call call{client, c, {}, !from_server};
    if (c.verb == protocol::control_verb::abort) {
      for (const auto& [key, id] : by_client_id) {
        if (key.first == client && (c.all || key.second == c.request_id)) call.ids.push_back(id);
      }
      if (!c.all && call.ids.empty()) {
        protocol::error_reply e = protocol::error_reply_from(
            not_found("no running request %llu", (unsigned long long)c.request_id), c.request_id, c.tag);
        send(client, e);
        return;
      }
    }
    self->send(params.scheduler, control_atom::value, std::make_shared<const control_call>(std::move(call)));
  }

  // `weight_version`: the weights that produced these events (scheduler actor).
  void on_events(const sched::event_batch& ev, uint64_t weight_version) {
    for (const sched::token_event& t : ev.tokens) {
      auto it = live.find(t.request_id);
      if (it == live.end()) continue;
      live_generation& g = it->second;
      if (!g.session.empty()) {
        g.answer_ids.push_back(t.token);
        g.answer_text += t.text;
      }
      protocol::chunk_event c =
          to_chunk(t, g.client_request_id, g.next_seq[t.sample]++, g.logprobs, g.top_logprobs);
      c.weight_version = weight_version;
      send(g.client, c);
    }
    for (const sched::finish_event& f : ev.finishes) {
      auto it = live.find(f.request_id);
      if (it == live.end()) continue;
      live_generation& g = it->second;
      if (f.refused) {  // before it started: one error reply, no finals (protocol §5.1)
        send(g.client, protocol::error_reply_from(status(f.code, f.message), g.client_request_id));
        forget(it);
        continue;
      }
      std::vector<protocol::routing_part> parts;
      protocol::final_event fe = to_final(f, g.client_request_id, params.max_routing_ids, &parts);
      fe.weight_version = weight_version;
      for (protocol::routing_part& p : parts) send(g.client, protocol::reply{std::move(p)});
      send(g.client, fe);
      if (--g.remaining <= 0) {
        if (!g.session.empty()) {
          sessions->remember(g.session, std::move(g.messages), std::move(g.prompt), g.answer_ids,
                             std::move(g.answer_text), f.reason);
        }
        forget(it);
      }
    }
  }

  /// `g` with `ids` as its prompt (a continued chat turn).
  static protocol::generate_request with_token_ids(const protocol::generate_request& g,
                                                   const std::vector<int32_t>& ids) {
    protocol::generate_request t;
    t.request_id = g.request_id;
    t.kind = protocol::prompt_kind::token_ids;
    t.token_ids.assign(ids.begin(), ids.end());
    t.sampling = g.sampling;
    t.session_id = g.session_id;
    t.priority = g.priority;
    t.return_routing = g.return_routing;
    t.return_indexer_picks = g.return_indexer_picks;
    t.logprob_start = g.logprob_start;
    return t;
  }

  /// A generation whose last final (or refusal) went out: its admission counts come back.
  void forget(std::map<uint64_t, live_generation>::iterator it) {
    const live_generation& g = it->second;
    by_client_id.erase({g.client, g.client_request_id});
    if (auto c = live_per_client.find(g.client); c != live_per_client.end() && --c->second <= 0) {
      live_per_client.erase(c);
    }
    live_prompt_tokens -= g.prompt_tokens;
    live.erase(it);
  }
};

gateway_actor::behavior_type gateway_impl(gateway_self self, gateway_params params) {
  self->state.params = std::move(params);
  self->state.sessions =
      std::make_unique<chat_sessions>(self->state.params.tok, k_max_chat_sessions, k_max_chat_session_tokens);
  return {
      [=](inbound_atom, std::shared_ptr<const inbound_request> in) {
        if (in->local) self->state.register_local(in->client, in->local);
        if (const auto* g = std::get_if<protocol::generate_request>(&in->request)) {
          self->state.on_generate(self, in->client, *g);
        } else {
          self->state.on_control(self, in->client, std::get<protocol::control_request>(in->request),
                                 in->from_server);
        }
      },
      [=](events_atom, std::shared_ptr<const sched::event_batch> ev, uint64_t weight_version) {
        self->state.on_events(*ev, weight_version);
      },
      [=](reply_atom, std::shared_ptr<const addressed_reply> r) {
        if (const auto* st = std::get_if<protocol::stats_reply>(&r->reply)) {
          self->state.send(r->client, protocol::reply{self->state.with_gateway_stats(*st)});
        } else {
          self->state.send(r->client, r->reply);
        }
      },
  };
}

}  // namespace

gateway_actor spawn_gateway_actor(caf::actor_system& sys, const gateway_params& params) {
  return sys.spawn(gateway_impl, params);
}

}  // namespace hart::actors
