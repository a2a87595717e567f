// Client-side commands over the message API:
//   hart client  — JSON lines in (one request per line), JSON lines out (every reply);
//   hart chat    — an interactive, streaming, multi-turn session;
//   hart stats   — the server's metrics as Prometheus text.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/cli/cli_common.h"
#include "runtime/protocol/routing_parts.h"
#include "runtime/transport/client.h"

namespace hart::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono;

status_or<protocol::generate_request> generate_from_json(const json& j) {
  protocol::generate_request g;
  g.request_id = j.value("id", uint64_t{0});
  if (j.contains("tokens")) {
    g.kind = protocol::prompt_kind::token_ids;
    g.token_ids = j["tokens"].get<std::vector<uint32_t>>();
  } else if (j.contains("messages")) {
    g.kind = protocol::prompt_kind::messages;
    for (const json& m : j["messages"]) g.messages.push_back({m.value("role", ""), m.value("content", "")});
  } else if (j.contains("prompt")) {
    g.kind = protocol::prompt_kind::text;
    g.text = j["prompt"].get<std::string>();
  } else {
    return invalid_argument("generate needs 'tokens', 'messages' or 'prompt'");
  }
  protocol::sampling_options& s = g.sampling;
  s.temperature = j.value("temperature", 0.0f);
  s.top_p = j.value("top_p", 1.0f);
  s.top_k = j.value("top_k", -1);
  s.min_p = j.value("min_p", 0.0f);
  if (j.contains("seed")) {
    s.has_seed = true;
    s.seed = j["seed"].get<uint64_t>();
  }
  s.max_new_tokens = j.value("max_new_tokens", 256u);
  s.min_new_tokens = j.value("min_new_tokens", 0u);
  s.stop = j.value("stop", std::vector<std::string>{});
  s.stop_token_ids = j.value("stop_token_ids", std::vector<uint32_t>{});
  s.ignore_eos = j.value("ignore_eos", false);
  s.n = j.value("n", 1u);
  s.logprobs = j.value("logprobs", false);
  s.top_logprobs = j.value("top_logprobs", uint8_t{0});
  g.session_id = j.value("session", std::string());
  g.priority = j.value("priority", 0);
  g.return_routing = j.value("return_routing", false);
  g.return_indexer_picks = j.value("return_indexer_picks", false);
  return g;
}

status_or<protocol::request> request_from_json(const json& j, uint64_t tag) {
  if (!j.is_object() || j.size() != 1) return invalid_argument("a request is an object with one key");
  const std::string verb = j.begin().key();
  const json& body = j.begin().value();
  if (verb == "generate") {
    HART_ASSIGN_OR_RETURN(protocol::generate_request g, generate_from_json(body));
    return protocol::request{g};
  }
  protocol::control_request c;
  c.tag = tag;
  if (verb == "abort") {
    c.verb = protocol::control_verb::abort;
    c.all = body.value("all", false);
    c.request_id = body.value("id", uint64_t{0});
  } else if (verb == "pause") {
    c.verb = protocol::control_verb::pause;
    const std::string m = body.is_string() ? body.get<std::string>() : body.value("mode", "abort");
    if (m == "abort") c.mode = protocol::pause_mode::abort;
    else if (m == "retract") c.mode = protocol::pause_mode::retract;
    else if (m == "in_place") c.mode = protocol::pause_mode::in_place;
    else return invalid_argument("pause mode '%s' (abort, retract, in_place)", m.c_str());
  } else if (verb == "resume") {
    c.verb = protocol::control_verb::resume;
  } else if (verb == "flush_cache") {
    c.verb = protocol::control_verb::flush_cache;
  } else if (verb == "health") {
    c.verb = protocol::control_verb::health;
  } else if (verb == "stats") {
    c.verb = protocol::control_verb::stats;
  } else if (verb == "weight_version") {
    c.verb = protocol::control_verb::weight_version;
  } else {
    return invalid_argument("unknown verb '%s'", verb.c_str());
  }
  return protocol::request{c};
}

const char* reason_name(protocol::finish_reason r) {
  switch (r) {
    case protocol::finish_reason::stop: return "stop";
    case protocol::finish_reason::length: return "length";
    case protocol::finish_reason::abort: return "abort";
    case protocol::finish_reason::error: return "error";
  }
  return "?";
}

json routing_to_json(const protocol::routing_info& r) {
  auto layers = [](const std::vector<protocol::layer_routing>& ls) {
    json a = json::array();
    for (const protocol::layer_routing& l : ls) a.push_back({{"layer", l.layer}, {"k", l.k}, {"ids", l.ids}});
    return a;
  };
  return {{"positions", r.positions}, {"experts", layers(r.experts)}, {"picks", layers(r.picks)}};
}

json reply_to_json(const protocol::reply& r) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, protocol::chunk_event>) {
          json j = {{"id", x.request_id}, {"sample", x.sample_index}, {"seq", x.seq}, {"tokens", x.token_ids}, {"text", x.text}};
          if (!x.logprobs.empty()) j["logprobs"] = x.logprobs;
          if (!x.top_logprobs.empty()) {
            json tops = json::array();
            for (const auto& list : x.top_logprobs) {
              json l = json::array();
              for (const auto& t : list) l.push_back({{"token", t.token_id}, {"logprob", t.logprob}});
              tops.push_back(l);
            }
            j["top_logprobs"] = tops;
          }
          return {{"chunk", j}};
        } else if constexpr (std::is_same_v<T, protocol::final_event>) {
          json j = {{"id", x.request_id}, {"sample", x.sample_index}, {"finish_reason", reason_name(x.reason)},
                    {"usage", {{"prompt_tokens", x.usage.prompt_tokens}, {"completion_tokens", x.usage.completion_tokens},
                               {"cached_tokens", x.usage.cached_tokens}}},
                    {"timings_us", {{"queue", x.timings.queue_us}, {"ttft", x.timings.ttft_us}, {"total", x.timings.total_us}}}};
          if (!x.error_message.empty()) j["error"] = x.error_message;
          if (x.routing.positions > 0) j["routing"] = routing_to_json(x.routing);
          return {{"final", j}};
        } else if constexpr (std::is_same_v<T, protocol::routing_part>) {  // run_client joins them into finals
          return {{"routing_part", {{"id", x.request_id}, {"sample", x.sample_index}, {"first_position", x.first_position},
                                    {"routing", routing_to_json(x.routing)}}}};
        } else if constexpr (std::is_same_v<T, protocol::error_reply>) {
          return {{"error", {{"tag", x.tag}, {"id", x.request_id}, {"code", status_code_name(x.code)}, {"message", x.message}}}};
        } else if constexpr (std::is_same_v<T, protocol::ack_reply>) {
          return {{"ack", {{"tag", x.tag}, {"affected", x.affected}}}};
        } else if constexpr (std::is_same_v<T, protocol::health_reply>) {
          return {{"health", {{"tag", x.tag}, {"ok", x.ok}, {"uptime_us", x.uptime_us}}}};
        } else if constexpr (std::is_same_v<T, protocol::stats_reply>) {
          json e = json::object();
          for (const auto& [k, v] : x.entries) e[k] = v;
          return {{"stats", {{"tag", x.tag}, {"entries", e}}}};
        } else {
          static_assert(std::is_same_v<T, protocol::weight_version_reply>);
          return {{"weight_version", {{"tag", x.tag}, {"version", x.version}}}};
        }
      },
      r);
}

status_or<std::unique_ptr<transport::client>> connect(const client_options& o) {
  transport::client_params p;
  p.endpoint = o.connect;
  return transport::client::connect(p);
}

}  // namespace

int run_client(const client_options& o) {
  auto c = connect(o);
  if (!c.ok()) return fail(c.get_status());
  // Every request is sent first; then replies are printed until every generation has
  // its finals and every control verb its answer.
  int64_t pending_finals = 0, pending_controls = 0;
  std::string line;
  uint64_t tag = 1;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) return fail(invalid_argument("not JSON: %s", line.c_str()));
    auto r = request_from_json(j, tag++);
    if (!r.ok()) return fail(r.get_status());
    if (const auto* g = std::get_if<protocol::generate_request>(&*r)) {
      pending_finals += std::max<uint32_t>(1, g->sampling.n);
    } else {
      ++pending_controls;
    }
    if (status s = (*c)->send(*r); !s.ok()) {
      std::cout << json{{"error", {{"code", status_code_name(s.code())}, {"message", s.message()}}}}.dump() << std::endl;
      if (std::holds_alternative<protocol::generate_request>(*r)) pending_finals -= std::max<uint32_t>(1, std::get<protocol::generate_request>(*r).sampling.n);
      else --pending_controls;
    }
  }
  const auto deadline = steady_clock::now() + milliseconds(o.timeout_ms);
  protocol::routing_assembler routing;
  while (pending_finals > 0 || pending_controls > 0) {
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return fail(status(status_code::unavailable, "timed out waiting for replies"));
    auto r = (*c)->receive(left);
    if (!r.ok()) return fail(r.get_status());
    // Routing too long for a final arrives in parts before it: printed joined, in the final.
    status joined;
    if (auto* p = std::get_if<protocol::routing_part>(&*r)) {
      if (joined = routing.add(std::move(*p)); joined.ok()) continue;
    } else if (auto* f = std::get_if<protocol::final_event>(&*r)) {
      joined = routing.complete(f);
    }
    if (!joined.ok()) std::cout << json{{"error", {{"code", status_code_name(joined.code())}, {"message", joined.message()}}}}.dump() << std::endl;
    if (std::holds_alternative<protocol::routing_part>(*r)) continue;
    std::cout << reply_to_json(*r).dump() << std::endl;
    if (std::holds_alternative<protocol::final_event>(*r)) --pending_finals;
    else if (const auto* e = std::get_if<protocol::error_reply>(&*r)) {
      if (e->tag) --pending_controls;
      else if (e->request_id) --pending_finals;  // a refused generation gets no finals
    } else if (!std::holds_alternative<protocol::chunk_event>(*r)) {
      --pending_controls;
    }
  }
  return 0;
}

int run_chat(const client_options& o) {
  auto c = connect(o);
  if (!c.ok()) return fail(c.get_status());
  std::vector<protocol::chat_message> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  std::fprintf(stderr, "hart chat on %s — /reset clears the conversation, /quit or Ctrl-D ends\n", o.connect.c_str());
  uint64_t id = 1;
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line)) {
    if (line == "/quit") break;
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    protocol::generate_request g;
    g.request_id = id++;
    g.kind = protocol::prompt_kind::messages;
    g.messages = history;
    g.sampling.temperature = o.temperature;
    g.sampling.max_new_tokens = uint32_t(o.max_new_tokens);
    const auto t0 = steady_clock::now();
    auto res = (*c)->generate(g, milliseconds(o.timeout_ms), [](const protocol::chunk_event& ch) {
      std::fputs(ch.text.c_str(), stdout);
      std::fflush(stdout);
    });
    std::fputs("\n", stdout);
    if (!res.ok()) {
      std::fprintf(stderr, "hart: error: %s\n", res.get_status().to_string().c_str());
      history.pop_back();
      continue;
    }
    const auto& s = res->samples[0];
    const double secs = duration<double>(steady_clock::now() - t0).count();
    std::fprintf(stderr, "[%u prompt tokens (%u cached), %u generated in %.2f s, %.1f tok/s, %s]\n",
                 s.final.usage.prompt_tokens, s.final.usage.cached_tokens, s.final.usage.completion_tokens, secs,
                 s.final.usage.completion_tokens / std::max(secs, 1e-9), reason_name(s.final.reason));
    history.push_back({"assistant", s.text});
  }
  return 0;
}

int run_stats(const client_options& o) {
  auto c = connect(o);
  if (!c.ok()) return fail(c.get_status());
  protocol::control_request q;
  q.tag = 1;
  q.verb = protocol::control_verb::stats;
  if (status s = (*c)->send(protocol::request{q}); !s.ok()) return fail(s);
  auto r = (*c)->receive(milliseconds(o.timeout_ms));
  if (!r.ok()) return fail(r.get_status());
  if (const auto* st = std::get_if<protocol::stats_reply>(&*r)) {
    std::fputs(st->prometheus.c_str(), stdout);
    return 0;
  }
  std::cout << reply_to_json(*r).dump() << std::endl;
  return 1;
}

}  // namespace hart::cli
