#include "runtime/http/prometheus.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

namespace hart::http {
namespace {

// The stats entries that count since start (scheduler_actor.cpp make_stats, gateway_actor.cpp
// with_gateway_stats); the others are
// levels or windowed statistics. NOTE(hart): a new monotonic entry belongs here, or it is
// exposed as a gauge (still parseable, but rate() would not treat resets right).
const std::set<std::string>& counters() {
  static const std::set<std::string> names = {"steps",
                                              "steps_planned_ahead",
                                              "preemptions",
                                              "finished",
                                              "generated_tokens",
                                              "prefill_tokens",
                                              "spec_verify_passes",
                                              "spec_draft_tokens",
                                              "spec_accepted_tokens",
                                              "decode_steps_with_shard",
                                              "pages_granted_ahead",
                                              "decode_outcomes_caught",
                                              "cache_evicted_full_pages",
                                              "worker_failures",
                                              "requests_refused_limits",
                                              "slow_clients",
                                              "replies_dropped_slow",
                                              "replies_unroutable",
                                              "auth_refused",
                                              "connections_refused"};
  return names;
}

std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Metric names are [a-zA-Z_:][a-zA-Z0-9_:]*; the stats' names already are, this keeps it so.
std::string metric_name(const std::string& name) {
  std::string out = "hart_";
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return out;
}

std::string bound_text(double b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", b);
  return buf;
}

const char* histogram_help(const std::string& name) {
  if (name == "time_to_first_token_seconds") return "arrival to first generated token, per sample";
  if (name == "time_per_output_token_seconds")
    return "per output token after the first, per sample of two or more";
  if (name == "e2e_request_latency_seconds") return "arrival to finish, per sample";
  if (name == "step_latency_seconds") return "scheduler step, plan made to result applied";
  return "hart latency histogram";
}

}  // namespace

std::string prometheus_text(const protocol::stats_reply& stats) {
  std::string out;
  for (const auto& [name, h] : stats.histograms) {
    const std::string m = metric_name(name);
    out += "# HELP " + m + " " + histogram_help(name) + "\n";
    out += "# TYPE " + m + " histogram\n";
    for (size_t i = 0; i < h.bounds.size(); ++i)
      out += m + "_bucket{le=\"" + bound_text(h.bounds[i]) + "\"} " + std::to_string(h.cumulative(i)) + "\n";
    out += m + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
    out += m + "_sum " + value_text(h.sum) + "\n";
    out += m + "_count " + std::to_string(h.count) + "\n";
  }
  for (const auto& [name, value] : stats.entries) {
    const bool counter = counters().count(name) > 0;
    const std::string m = metric_name(name) + (counter ? "_total" : "");
    out += "# HELP " + m + " hart scheduler stat " + name + "\n";
    out += "# TYPE " + m + (counter ? " counter\n" : " gauge\n");
    out += m + " " + value_text(value) + "\n";
  }
  return out;
}

}  // namespace hart::http
