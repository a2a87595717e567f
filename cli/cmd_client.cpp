// Client-side commands over the message API:
//   hart client  — JSON lines in (one request per line), JSON lines out (every reply);
//   hart chat    — an interactive, streaming, multi-turn session;
//   hart stats   — the server's metrics as Prometheus text.
#include "cli/cli_common.h"
#include "cli/client_json.h"
#include "runtime/protocol/routing_parts.h"
#include "runtime/transport/client.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <limits>
#include <map>
#include <string>

namespace hart::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono;

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
          json j = {{"id", x.request_id}, {"sample", x.sample_index},
                    {"seq", x.seq},       {"tokens", x.token_ids},
                    {"text", x.text},     {"weight_version", x.weight_version}};
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
          json j = {
              {"id", x.request_id},
              {"sample", x.sample_index},
              {"finish_reason", protocol::finish_reason_name(x.reason)},
              {"usage",
               {{"prompt_tokens", x.usage.prompt_tokens},
                {"completion_tokens", x.usage.completion_tokens},
                {"cached_tokens", x.usage.cached_tokens}}},
              {"timings_us",
               {{"queue", x.timings.queue_us}, {"ttft", x.timings.ttft_us}, {"total", x.timings.total_us}}},
              {"weight_version", x.weight_version}};
          if (!x.error_message.empty()) j["error"] = x.error_message;
          if (x.routing.positions > 0) j["routing"] = routing_to_json(x.routing);
          return {{"final", j}};
        } else if constexpr (std::is_same_v<T,
                                            protocol::routing_part>) {  // run_client joins them into finals
          return {{"routing_part",
                   {{"id", x.request_id},
                    {"sample", x.sample_index},
                    {"first_position", x.first_position},
                    {"routing", routing_to_json(x.routing)}}}};
        } else if constexpr (std::is_same_v<T, protocol::error_reply>) {
          return {{"error",
                   {{"tag", x.tag},
                    {"id", x.request_id},
                    {"code", status_code_name(x.code)},
                    {"message", x.message}}}};
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

// client, chat and stats: the server's endpoint and keys, and how long to wait for it.
void add_connect(CLI::App* cmd, client_options* o) {
  add_curve(cmd, &o->curve);
  cmd->add_option("--connect", o->connect, "Server endpoint")->capture_default_str();
  cmd->add_option("--timeout-ms", o->timeout_ms, "Give up after this long")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))  // ~34 years: deadlines stay in the clock's range
      ->capture_default_str();
  cmd->add_option("--connect-timeout-ms", o->connect_timeout_ms,
                  "Fail at once if no server answers a health check at --connect within this")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
}

// Connected and answering: ZeroMQ connects to any address without a word, so
// a health check first turns "no server there" into an error in seconds, not
// a silent wait of --timeout-ms.
status_or<std::unique_ptr<transport::client>> connect(const client_options& o) {
  constexpr uint64_t k_health_tag = ~uint64_t(0);  // a tag no command line of the user sends first
  transport::client_params p;
  p.endpoint = o.connect;
  HART_RETURN_IF_ERROR(curve_client_keys(o.curve, &p.curve_server_key, &p.curve_secret_key));
  HART_ASSIGN_OR_RETURN(std::unique_ptr<transport::client> c, transport::client::connect(p));
  protocol::control_request q;
  q.tag = k_health_tag;
  q.verb = protocol::control_verb::health;
  HART_RETURN_IF_ERROR(c->send(protocol::request{q}));
  auto r = c->receive(milliseconds(o.connect_timeout_ms));
  const auto* h = r.ok() ? std::get_if<protocol::health_reply>(&*r) : nullptr;
  if (!h || h->tag != k_health_tag) {
    return unavailable("no hart server answered at %s within %lld ms (--connect-timeout-ms)%s",
                       o.connect.c_str(), (long long)o.connect_timeout_ms,
                       r.ok() ? "" : (": " + r.get_status().message()).c_str());
  }
  return c;
}

// The client's bookkeeping: what it still owes the user before it may exit.
class client_session {
 public:
  explicit client_session(transport::client& c) : c_(c) {}

  /// One input line: sent, or answered here with one error line.
  void line(const std::string& line) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    json j = json::parse(line, nullptr, false);
    parsed_request p;
    if (j.is_discarded()) {
      p.error =
          invalid_argument("not JSON: %s", (line.size() <= 80 ? line : line.substr(0, 77) + "...").c_str());
    } else {
      p = request_from_json(j, tag_++);
    }
    if (p.error.ok()) {
      if (status s = c_.send(p.request); !s.ok()) p.error = s;
    }
    if (!p.error.ok()) {
      refused_ = true;
      // replace: a line that is not JSON may not be UTF-8 either.
      std::cout << error_line(p).dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
      return;
    }
    if (const auto* g = std::get_if<protocol::generate_request>(&p.request)) {
      finals_owed_[g->request_id].push_back(g->sampling.n);
      pending_finals_ += g->sampling.n;
    } else {
      ++pending_controls_;
    }
  }

  /// One reply: printed (routing parts joined into their final) and counted.
  void reply(protocol::reply&& r) {
    status joined;
    if (auto* p = std::get_if<protocol::routing_part>(&r)) {
      if (joined = routing_.add(std::move(*p)); joined.ok()) return;
    } else if (auto* f = std::get_if<protocol::final_event>(&r)) {
      joined = routing_.complete(f);
    }
    if (!joined.ok())
      std::cout << json{{"error", {{"code", status_code_name(joined.code())}, {"message", joined.message()}}}}
                       .dump()
                << std::endl;
    if (std::holds_alternative<protocol::routing_part>(r)) return;
    std::cout << reply_to_json(r).dump() << std::endl;
    if (const auto* f = std::get_if<protocol::final_event>(&r)) {
      auto it = finals_owed_.find(f->request_id);
      if (it == finals_owed_.end()) return;
      --pending_finals_;
      if (--it->second.front() == 0) it->second.pop_front();
      if (it->second.empty()) finals_owed_.erase(it);
    } else if (const auto* e = std::get_if<protocol::error_reply>(&r)) {
      if (e->tag) {
        --pending_controls_;
      } else if (auto it = finals_owed_.find(e->request_id); it != finals_owed_.end()) {
        pending_finals_ -= it->second.back();  // a refused generation gets no finals
        it->second.pop_back();
        if (it->second.empty()) finals_owed_.erase(it);
      }
    } else if (!std::holds_alternative<protocol::chunk_event>(r)) {
      --pending_controls_;
    }
  }

  bool owes() const { return pending_finals_ > 0 || pending_controls_ > 0; }
  bool refused() const { return refused_; }

 private:
  transport::client& c_;
  bool refused_ = false;
  int64_t pending_controls_ = 0;
  // Per request id, the finals each generation sent with it still owes, oldest first: a
  // refusal from the server (an error with the id) answers the newest one in full.
  std::map<uint64_t, std::deque<int64_t>> finals_owed_;
  int64_t pending_finals_ = 0;
  uint64_t tag_ = 1;
  protocol::routing_assembler routing_;
};

}  // namespace

CLI::App* add_client_command(CLI::App& app, client_options* o) {
  CLI::App* cmd =
      app.add_subcommand("client", "JSON lines in (one request per line), JSON lines out (every reply)");
  add_connect(cmd, o);
  return cmd;
}

int run_client(const client_options& o) {
  auto c = connect(o);
  if (!c.ok()) return fail(c.get_status());
  // Lines are sent as they arrive and replies printed as they come, so a user can watch a
  // stream and abort it from the same terminal. After stdin closes the client waits (up to
  // --timeout-ms) until every generation has its finals (or its error) and every control
  // verb its answer. A line that is not a valid request is answered here with one error line.
  client_session session(**c);
  std::string pending;  // input bytes after the last complete line
  bool input_open = true;
  auto drain = [&](milliseconds wait) -> status {
    for (;;) {
      auto r = (*c)->receive(wait);
      if (!r.ok()) return r.get_status().code() == status_code::unavailable ? status{} : r.get_status();
      session.reply(std::move(*r));
      wait = milliseconds(0);
    }
  };
  while (input_open) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    const int ready = ::poll(&in, 1, 10);
    if (ready > 0) {
      char buf[65536];
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) {
        input_open = false;
        if (!pending.empty()) session.line(pending);
      } else {
        pending.append(buf, size_t(n));
        for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
          session.line(pending.substr(0, nl));
        }
      }
    }
    if (status s = drain(milliseconds(0)); !s.ok()) return fail(s);
  }
  const auto deadline = steady_clock::now() + milliseconds(o.timeout_ms);
  while (session.owes()) {
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return fail(status(status_code::unavailable, "timed out waiting for replies"));
    auto r = (*c)->receive(left);
    if (!r.ok()) return fail(r.get_status());
    session.reply(std::move(*r));
  }
  return session.refused() ? 1 : 0;
}

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) {
  g_interrupted = 1;
}

// SIGINT sets g_interrupted while one of these lives (an answer streams); the default after.
class interrupt_catcher {
 public:
  interrupt_catcher() {
    struct sigaction on {};
    on.sa_handler = on_interrupt;
    sigemptyset(&on.sa_mask);
    g_interrupted = 0;
    sigaction(SIGINT, &on, &before_);
  }
  ~interrupt_catcher() { sigaction(SIGINT, &before_, nullptr); }
  interrupt_catcher(const interrupt_catcher&) = delete;
  interrupt_catcher& operator=(const interrupt_catcher&) = delete;

 private:
  struct sigaction before_ {};
};

}  // namespace

CLI::App* add_chat_command(CLI::App& app, client_options* o) {
  // NOTE(client): not CLI::Range, which lets NaN through (every comparison with it is false).
  char temperature_range_text[32];
  std::snprintf(temperature_range_text, sizeof temperature_range_text, "[0, %g]",
                double(protocol::max_temperature));
  const CLI::Validator temperature_range(
      [range = std::string(temperature_range_text)](std::string& in) {
        float t = 0;
        if (CLI::detail::lexical_cast(in, t) && t >= 0.0f && t <= protocol::max_temperature)
          return std::string();
        return "Value " + in + " not a number in " + range;
      },
      std::string("FLOAT in ") + temperature_range_text);
  CLI::App* cmd =
      app.add_subcommand("chat", "Interactive streaming chat with a running server (Ctrl-C stops an answer)");
  add_connect(cmd, o);
  cmd->add_option("--system", o->system, "System prompt");
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Tokens per answer at most")
      ->check(CLI::Range(int64_t(1), int64_t(std::numeric_limits<uint32_t>::max())))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")
      ->check(temperature_range)
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Keep generating past the end-of-sequence token (up to --max-new-tokens)");
  return cmd;
}

int run_chat(const client_options& o) {
  auto c = connect(o);
  if (!c.ok()) return fail(c.get_status());
  std::vector<protocol::chat_message> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  std::fprintf(
      stderr,
      "hart chat on %s — Ctrl-C stops an answer, /reset clears the conversation, /quit or Ctrl-D ends\n",
      o.connect.c_str());
  uint64_t id = 1;
  // One session per conversation: the server then continues each turn from the previous one's
  // token ids, so the whole conversation so far is a prefix-cache hit (chat_sessions.h).
  const auto new_session = [] {
    return "hart-chat-" + std::to_string(::getpid()) + "-" +
           std::to_string(steady_clock::now().time_since_epoch().count());
  };
  std::string session = new_session();
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line)) {
    if (line == "/quit") break;
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      session = new_session();
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
    g.sampling.ignore_eos = o.ignore_eos;
    g.session_id = session;
    const auto t0 = steady_clock::now();
    // Ctrl-C while it streams aborts the answer on the server; the conversation goes on.
    status_or<transport::generation_result> res = [&] {
      interrupt_catcher ctrl_c;
      return (*c)->generate(
          g, milliseconds(o.timeout_ms),
          [](const protocol::chunk_event& ch) {
            std::fputs(ch.text.c_str(), stdout);
            std::fflush(stdout);
          },
          [] { return g_interrupted != 0; });
    }();
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!res.ok()) {
      std::fprintf(stderr, "hart: error: %s\n", res.get_status().to_string().c_str());
      history.pop_back();
      continue;
    }
    const protocol::final_event& f = res->samples[0].final;
    const double secs = duration<double>(steady_clock::now() - t0).count();
    std::fprintf(stderr, "[%u prompt tokens (%u cached), %u generated in %.2f s, %.1f tok/s, %s]\n",
                 f.usage.prompt_tokens, f.usage.cached_tokens, f.usage.completion_tokens, secs,
                 f.usage.completion_tokens / std::max(secs, 1e-9), protocol::finish_reason_name(f.reason));
    history.push_back({"assistant", res->samples[0].text});
  }
  return 0;
}

CLI::App* add_stats_command(CLI::App& app, client_options* o) {
  CLI::App* cmd = app.add_subcommand("stats", "Print a running server's metrics (Prometheus text)");
  add_connect(cmd, o);
  return cmd;
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
