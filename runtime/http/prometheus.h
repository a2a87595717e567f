// File: runtime/http/prometheus.h
// GET /metrics: the scheduler's stats entries (the ZeroMQ `stats` verb's) as Prometheus text
// exposition 0.0.4, each with its `# HELP` and `# TYPE`. Counters (monotonic since start) get
// the `_total` suffix; everything else (queue depth, pages used, latency quantiles over the
// recent window, rates) is a gauge.
//
//   res.set_content(prometheus_text(stats), k_prometheus_content_type);
#pragma once

#include "runtime/protocol/messages.h"

#include <string>

namespace hart::http {

inline constexpr const char* k_prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// `hart_<name>` per entry, in the stats' order.
std::string prometheus_text(const protocol::stats_reply& stats);

}  // namespace hart::http
