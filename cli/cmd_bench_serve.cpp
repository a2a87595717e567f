// `hart bench-serve`: an InferenceX-style load generator against a running
// server. For each concurrency, C clients send random token prompts of the
// given lengths back to back; one summary line per concurrency: requests,
// output tokens/s (server) vs per user, TTFT and TPOT p50/p99, and the
// server's decode model step, the worker's idle gap between back-to-back
// decode steps (the serving overhead per step, target S1, from stats; also
// split by whether the step was planned within grants or asked the cache
// shard) and the delivery latency of each token (its server timestamp to the
// client's receipt).
#include "cli/cli_common.h"
#include "runtime/transport/client.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

namespace hart::cli {
namespace {

using namespace std::chrono;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

double server_stat(transport::client& c, const char* name) {
  protocol::control_request q;
  q.tag = 77;
  q.verb = protocol::control_verb::stats;
  auto r = control_call(c, q, seconds(10));
  return r.ok() ? stat_value(std::get<protocol::stats_reply>(*r), name) : -1;
}

}  // namespace

CLI::App* add_bench_serve_command(CLI::App& app, bench_serve_options* o) {
  CLI::App* cmd =
      app.add_subcommand("bench-serve", "Load generator against a running server: a concurrency sweep");
  cmd->add_option("--connect", o->connect, "Server endpoint")->capture_default_str();
  add_curve(cmd, &o->curve);
  // The request fields these become are checked here, so none wraps into its wire type.
  cmd->add_option("--concurrency", o->concurrency, "Concurrent users, one summary line each")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Prompt tokens")
      ->check(CLI::Range(int64_t(1), int64_t(protocol::max_prompt_tokens)))
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Generated tokens (EOS ignored)")
      ->check(CLI::Range(int64_t(1), int64_t(std::numeric_limits<uint32_t>::max())))
      ->capture_default_str();
  cmd->add_option("--requests-per-user", o->requests_per_user, "Requests each user sends back to back")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "Prompt token ids are drawn from [2, vocab)")
      ->check(CLI::Range(int64_t(3), int64_t(1) << 32))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Prompt seed")->capture_default_str();
  return cmd;
}

int run_bench_serve(const bench_serve_options& o) {
  transport::client_params cp;
  cp.endpoint = o.connect;
  if (status st = curve_client_keys(o.curve, &cp.curve_server_key, &cp.curve_secret_key); !st.ok())
    return fail(st);
  auto probe = transport::client::connect(cp);
  if (!probe.ok()) return fail(probe.get_status());
  std::printf(
      "%-5s %6s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s "
      "%10s "
      "%10s\n",
      "conc", "reqs", "out_tok/s", "tok/s/user", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "exec_mean",
      "gap_mean", "gap_p50", "gap_p99", "gapG_p99", "gapS_p50", "gapS_p99", "shard_n", "wake_p99",
      "apply_p99", "plan_p99", "hand_p99", "dlvr_p50", "dlvr_p99");
  for (int64_t conc : o.concurrency) {
    const double shard_steps_before = server_stat(**probe, "decode_steps_with_shard");
    std::vector<double> ttft_ms, tpot_ms, deliver_us;
    std::atomic<int64_t> out_tokens{0}, done{0}, errors{0};
    std::mutex m;
    const auto t0 = steady_clock::now();
    std::vector<std::thread> users;
    for (int64_t u = 0; u < conc; ++u) {
      users.emplace_back([&, u] {
        auto c = transport::client::connect(cp);
        if (!c.ok()) {
          ++errors;
          return;
        }
        std::mt19937 rng(uint32_t(o.seed + u));
        std::uniform_int_distribution<uint32_t> tok(2, uint32_t(o.vocab - 1));
        for (int64_t i = 0; i < o.requests_per_user; ++i) {
          protocol::generate_request g;
          g.request_id = uint64_t(i + 1);
          for (int64_t k = 0; k < o.input_len; ++k) g.token_ids.push_back(tok(rng));
          g.sampling.temperature = 0;
          g.sampling.max_new_tokens = uint32_t(o.output_len);
          g.sampling.ignore_eos = true;
          const auto start = steady_clock::now();
          steady_clock::time_point first{}, last{};
          int64_t n = 0;
          std::vector<double> deliver;
          auto res = (*c)->generate(g, minutes(10), [&](const protocol::chunk_event& ch) {
            last = steady_clock::now();
            if (n == 0) first = last;
            n += int64_t(ch.token_ids.size());
            // The server stamps CLOCK_MONOTONIC, which steady_clock reads too on one host.
            if (ch.server_time_us > 0) {
              deliver.push_back(double(duration_cast<microseconds>(last.time_since_epoch()).count()) -
                                double(ch.server_time_us));
            }
          });
          if (!res.ok() || n == 0) {
            ++errors;
            continue;
          }
          std::lock_guard<std::mutex> lock(m);
          ttft_ms.push_back(duration<double, std::milli>(first - start).count());
          if (n > 1) tpot_ms.push_back(duration<double, std::milli>(last - first).count() / double(n - 1));
          deliver_us.insert(deliver_us.end(), deliver.begin(), deliver.end());
          out_tokens += n;
          ++done;
        }
      });
    }
    for (auto& t : users) t.join();
    const double secs = duration<double>(steady_clock::now() - t0).count();
    const double exec_us = server_stat(**probe, "decode_exec_latency_us_mean");
    const double gap_mean = server_stat(**probe, "decode_gap_us_mean");
    const double gap50 = server_stat(**probe, "decode_gap_us_p50");
    const double gap99 = server_stat(**probe, "decode_gap_us_p99");
    const double gap_grants99 = server_stat(**probe, "decode_gap_grants_us_p99");
    const double gap_shard50 = server_stat(**probe, "decode_gap_shard_us_p50");
    const double gap_shard99 = server_stat(**probe, "decode_gap_shard_us_p99");
    const double shard_steps = server_stat(**probe, "decode_steps_with_shard") - shard_steps_before;
    double phase99[4];
    const char* phases[4] = {"wake", "apply", "plan", "handoff"};
    for (int i = 0; i < 4; ++i)
      phase99[i] = server_stat(**probe, ("decode_gap_" + std::string(phases[i]) + "_us_p99").c_str());
    const double per_user = tpot_ms.empty() ? 0 : 1000.0 / percentile(tpot_ms, 0.5);
    std::printf(
        "%-5lld %6lld %10.1f %10.1f %10.2f %10.2f %10.3f %10.3f %10.3f %10.1f %10.1f %10.1f %10.1f %10.1f "
        "%10.1f "
        "%10.0f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f%s\n",
        (long long)conc, (long long)done.load(), out_tokens / secs, per_user, percentile(ttft_ms, 0.5),
        percentile(ttft_ms, 0.99), percentile(tpot_ms, 0.5), percentile(tpot_ms, 0.99), exec_us / 1000.0,
        gap_mean, gap50, gap99, gap_grants99, gap_shard50, gap_shard99, shard_steps, phase99[0], phase99[1],
        phase99[2], phase99[3], percentile(deliver_us, 0.5), percentile(deliver_us, 0.99),
        errors ? "  (errors)" : "");
  }
  std::printf(
      "# ttft/tpot/exec in ms, gap/dlvr in us. tpot = time per output token seen by the client; "
      "exec = the server's model step of decode-only steps (mean); gap = the worker's idle time between two "
      "back-to-back decode steps (server stats: the serving overhead per decode step, S1); gapG / gapS = the "
      "gap of decode steps planned within grants / with a round trip to the cache shard; shard_n = decode "
      "steps planned with the shard during this row; wake/apply/plan/hand = the gap's phases (p99): step end "
      "to the scheduler handling its outcome, applying it, planning the next step, sent to the worker "
      "starting "
      "it; dlvr = step end (per-token server timestamp) to the client's receipt\n");
  return 0;
}

}  // namespace hart::cli
