// `hart soak`: a long mixed workload against a running server that checks it loses nothing and
// keeps nothing (issue 27). U users send random token prompts (1 or 2 samples, random lengths
// and sampling) back to back; some requests are aborted mid-stream, some clients drop their
// connection mid-stream and reconnect; meanwhile the server is paused (abort, retract or in
// place) and resumed, and new weights are pushed when a weight-sync endpoint is given. At the
// end it waits for the server to go idle, flushes its cache and prints: requests, finals by
// reason, errors, disconnects, lost (a request with neither a final per sample nor an error
// within the timeout), pages still held after the flush (leaked), and the server's RSS growth
// (--server-pid). Exit 1 on any loss, leak or failed push.
#include "cli/cli_common.h"
#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"
#include "runtime/transport/client.h"

#include <CLI/CLI.hpp>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>

namespace hart::cli {
namespace {

using namespace std::chrono;

struct tallies {
  std::atomic<uint64_t> sent{0}, finished{0}, aborted{0}, errors{0}, disconnected{0}, lost{0}, tokens{0};
  std::atomic<uint64_t> pauses{0}, pushes{0}, pushes_failed{0};
};

// The server's resident memory (VmRSS) in MB, or -1.
double rss_mb(int64_t pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
  }
  return -1;
}

status_or<std::unique_ptr<transport::client>> connect_client(const soak_options& o) {
  transport::client_params p;
  p.endpoint = o.connect;
  HART_RETURN_IF_ERROR(curve_client_keys(o.curve, &p.curve_server_key, &p.curve_secret_key));
  return transport::client::connect(p);
}

protocol::generate_request random_request(const soak_options& o, uint64_t id, std::mt19937_64& rng) {
  protocol::generate_request g;
  g.request_id = id;
  const int64_t len = 1 + int64_t(rng() % uint64_t(o.max_prompt_tokens));
  for (int64_t i = 0; i < len; ++i) g.token_ids.push_back(uint32_t(2 + rng() % uint64_t(o.vocab - 2)));
  g.sampling.max_new_tokens = uint32_t(1 + rng() % uint64_t(o.max_new_tokens));
  g.sampling.ignore_eos = true;
  g.sampling.n = rng() % 4 == 0 ? 2 : 1;
  g.sampling.temperature = rng() % 2 ? 0.0f : 0.8f;
  g.sampling.has_seed = true;
  g.sampling.seed = rng();
  g.sampling.logprobs = rng() % 2;
  return g;
}

// One user: requests until `next` passes o.requests, each normal, aborted or dropped.
void user(const soak_options& o, int u, std::atomic<uint64_t>& next, tallies& t) {
  std::mt19937_64 rng(o.seed * 1000003 + uint64_t(u));
  auto c = connect_client(o);
  if (!c.ok()) {
    std::fprintf(stderr, "hart: soak user %d: %s\n", u, c.get_status().to_string().c_str());
    return;
  }
  std::unique_ptr<transport::client> client = std::move(c).value();
  for (uint64_t i = next++; i < uint64_t(o.requests); i = next++) {
    const protocol::generate_request g = random_request(o, i + 1, rng);
    const double roll = double(rng() % 10000) / 10000.0;
    ++t.sent;
    if (roll < o.disconnect_rate) {  // gone mid-stream: its finals are not owed to anyone
      (void)client->send(protocol::request{g});
      const int replies = int(rng() % 4);
      for (int k = 0; k < replies && client->receive(milliseconds(200)).ok(); ++k) {
      }
      client.reset();
      auto again = connect_client(o);
      if (!again.ok()) return;
      client = std::move(again).value();
      ++t.disconnected;
      continue;
    }
    const bool abort = roll < o.disconnect_rate + o.abort_rate;
    const uint64_t abort_after = 1 + rng() % g.sampling.max_new_tokens;
    uint64_t chunks = 0;
    auto r = client->generate(
        g, milliseconds(o.timeout_ms), [&](const protocol::chunk_event& e) { chunks += e.token_ids.size(); },
        [&] { return abort && chunks >= abort_after; });
    t.tokens += chunks;
    if (r.ok()) {
      for (const transport::sample_output& s : r->samples) {
        switch (s.final.reason) {
          case protocol::finish_reason::abort:
            ++t.aborted;
            break;
          case protocol::finish_reason::error:
            ++t.errors;
            break;
          default:
            ++t.finished;
        }
      }
    } else if (r.get_status().code() == status_code::unavailable) {
      ++t.lost;  // no final and no error within the timeout
      std::fprintf(stderr, "hart: soak: request %llu: %s\n", (unsigned long long)g.request_id,
                   r.get_status().to_string().c_str());
    } else {
      ++t.errors;  // an error reply for the request (limits, a pause that refuses, ...)
    }
  }
}

// Pauses (each mode in turn) and resumes the server every o.pause_ms until `stop`.
void pauser(const soak_options& o, std::atomic<bool>& stop, tallies& t) {
  auto c = connect_client(o);
  if (!c.ok()) return;
  uint64_t tag = 1;
  const protocol::pause_mode modes[] = {protocol::pause_mode::in_place, protocol::pause_mode::retract,
                                        protocol::pause_mode::abort};
  for (int k = 0; !stop; ++k) {
    std::this_thread::sleep_for(milliseconds(o.pause_ms));
    if (stop) break;
    protocol::control_request p;
    p.tag = tag++;
    p.verb = protocol::control_verb::pause;
    p.mode = modes[k % 3];
    if (!control_call(**c, p, seconds(30)).ok()) continue;
    ++t.pauses;
    std::this_thread::sleep_for(milliseconds(20 + k % 80));
    protocol::control_request r;
    r.tag = tag++;
    r.verb = protocol::control_verb::resume;
    (void)control_call(**c, r, seconds(30));
  }
}

// Pushes the checkpoint as versions 1000, 1001, ... every o.push_ms until `stop`.
void pusher(const soak_options& o, std::atomic<bool>& stop, tallies& t) {
  auto ckpt = checkpoint_tensors_open(o.model_dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "hart: soak: %s\n", ckpt.get_status().to_string().c_str());
    ++t.pushes_failed;
    return;
  }
  weight_sync_client_params p;
  p.endpoint = o.weight_sync_endpoint;
  if (!curve_client_keys(o.curve, &p.curve_server_key, &p.curve_secret_key).ok()) return;
  for (uint64_t version = 1000; !stop; ++version) {
    std::this_thread::sleep_for(milliseconds(o.push_ms));
    if (stop) break;
    auto ws = weight_sync_client::connect(p);
    auto r = ws.ok() ? (*ws)->push(version, ckpt->tensors) : status_or<push_report>(ws.get_status());
    if (r.ok()) {
      ++t.pushes;
    } else {
      ++t.pushes_failed;
      std::fprintf(stderr, "hart: soak: push %llu: %s\n", (unsigned long long)version,
                   r.get_status().to_string().c_str());
    }
  }
}

}  // namespace

CLI::App* add_soak_command(CLI::App& app, soak_options* o) {
  CLI::App* cmd =
      app.add_subcommand("soak",
                         "A long mixed workload (aborts, disconnects, pauses, weight pushes) against a "
                         "running server; prints what was lost or leaked, exit 1 if anything was");
  cmd->add_option("--connect", o->connect, "Server endpoint")->capture_default_str();
  add_curve(cmd, &o->curve);
  cmd->add_option("--requests", o->requests, "Requests in all")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--users", o->users, "Concurrent clients")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-prompt-tokens", o->max_prompt_tokens, "Prompts have 1..N random token ids")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Each request generates 1..N tokens")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "Prompt ids are drawn from [2, vocab)")
      ->check(CLI::Range(int64_t(3), int64_t(1) << 32))
      ->capture_default_str();
  cmd->add_option("--abort-rate", o->abort_rate, "Share of requests aborted mid-stream")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--disconnect-rate", o->disconnect_rate,
                  "Share of requests whose client drops its connection mid-stream")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--pause-ms", o->pause_ms,
                  "Pause (in place, retract, abort in turn) and resume this often; 0 = never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--weight-sync-endpoint", o->weight_sync_endpoint,
                  "Push -m's tensors there every --push-ms as new versions");
  cmd->add_option("-m,--model", o->model_dir, "Checkpoint pushed with --weight-sync-endpoint");
  cmd->add_option("--push-ms", o->push_ms, "Time between weight pushes")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--server-pid", o->server_pid, "Report this process's RSS at start and end (the server)");
  cmd->add_option("--timeout-ms", o->timeout_ms, "A request without all its finals after this counts as lost")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the workload")->capture_default_str();
  return cmd;
}

int run_soak(const soak_options& o) {
  if (!o.weight_sync_endpoint.empty() && o.model_dir.empty()) {
    return fail(invalid_argument("--weight-sync-endpoint needs -m (the checkpoint to push)"));
  }
  auto ctl = connect_client(o);
  if (!ctl.ok()) return fail(ctl.get_status());
  protocol::control_request health;
  health.tag = 1;
  health.verb = protocol::control_verb::health;
  if (auto h = control_call(**ctl, health, milliseconds(o.connect_timeout_ms)); !h.ok()) {
    return fail(unavailable("no hart server answered at %s: %s", o.connect.c_str(),
                            h.get_status().to_string().c_str()));
  }
  const double rss_start = rss_mb(o.server_pid);
  const auto t0 = steady_clock::now();
  tallies t;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> users;
  for (int u = 0; u < o.users; ++u) users.emplace_back(user, std::cref(o), u, std::ref(next), std::ref(t));
  std::thread pause_thread, push_thread;
  if (o.pause_ms > 0) pause_thread = std::thread(pauser, std::cref(o), std::ref(stop), std::ref(t));
  if (!o.weight_sync_endpoint.empty())
    push_thread = std::thread(pusher, std::cref(o), std::ref(stop), std::ref(t));
  // A line on stderr every 10 s: a long soak shows where it is.
  std::atomic<int> users_done{0};
  std::thread progress([&] {
    for (auto last = steady_clock::now(); users_done < o.users;
         std::this_thread::sleep_for(milliseconds(100))) {
      if (steady_clock::now() - last < seconds(10)) continue;
      last = steady_clock::now();
      std::fprintf(stderr, "soak: %llu/%lld requests sent, %llu lost so far, %.0f s\n",
                   (unsigned long long)t.sent.load(), (long long)o.requests,
                   (unsigned long long)t.lost.load(), duration<double>(last - t0).count());
    }
  });
  for (std::thread& th : users) {
    th.join();
    ++users_done;
  }
  progress.join();
  stop = true;
  if (pause_thread.joinable()) pause_thread.join();
  if (push_thread.joinable()) push_thread.join();
  const double seconds_run = duration<double>(steady_clock::now() - t0).count();

  // Resumed, then flushed and read until nothing runs and no page is held, for up to 120 s:
  // dropped clients' generations run to their end, and an aborted sequence's pages come back
  // when the step it was in completes, which may be just after a flush. What is held then leaked.
  protocol::control_request resume;
  resume.tag = 2;
  resume.verb = protocol::control_verb::resume;
  (void)control_call(**ctl, resume, seconds(30));
  protocol::control_request flush, stats;
  flush.tag = 3;
  flush.verb = protocol::control_verb::flush_cache;
  stats.tag = 4;
  stats.verb = protocol::control_verb::stats;
  double live = 0, leaked = 0;
  for (auto deadline = steady_clock::now() + seconds(120);; std::this_thread::sleep_for(milliseconds(100))) {
    (void)control_call(**ctl, flush, seconds(30));
    auto after = control_call(**ctl, stats, seconds(30));
    if (!after.ok()) return fail(after.get_status());
    const protocol::stats_reply& s = std::get<protocol::stats_reply>(*after);
    live = stat_value(s, "live_requests") + stat_value(s, "running") + stat_value(s, "queue_depth");
    leaked = stat_value(s, "cache_full_pages_used") + stat_value(s, "cache_swa_pages_used");
    if ((live == 0 && leaked == 0) || steady_clock::now() >= deadline) break;
  }
  const double rss_end = rss_mb(o.server_pid);
  std::printf(
      "soak: %llu requests in %.1f s (%d users): %llu samples finished, %llu aborted, %llu errors, "
      "%llu disconnected, %llu lost; %llu tokens; %llu pauses, %llu weight pushes (%llu failed); after: %.0f "
      "live, "
      "%.0f pages held after flush (leaked)",
      (unsigned long long)t.sent.load(), seconds_run, o.users, (unsigned long long)t.finished.load(),
      (unsigned long long)t.aborted.load(), (unsigned long long)t.errors.load(),
      (unsigned long long)t.disconnected.load(), (unsigned long long)t.lost.load(),
      (unsigned long long)t.tokens.load(), (unsigned long long)t.pauses.load(),
      (unsigned long long)t.pushes.load(), (unsigned long long)t.pushes_failed.load(), live, leaked);
  if (rss_start > 0 && rss_end > 0) std::printf("; server RSS %.0f -> %.0f MB", rss_start, rss_end);
  std::printf("\n");
  return t.lost == 0 && leaked == 0 && live == 0 && t.pushes_failed == 0 ? 0 : 1;
}

}  // namespace hart::cli
