// File: runtime/core/histogram.h
// A latency histogram as Prometheus means one: counts per fixed bucket (upper bounds in
// seconds, then +Inf), their sum and count, all since start. The scheduler keeps them (time
// to first token, time per output token, request latency, step latency); the stats verb
// carries them and GET /metrics exposes them, so rates and quantiles come out of Prometheus.
//
//   latency_histogram h;
//   h.add(0.012);                 // seconds
//   h.cumulative(3);              // observations <= bounds[3]
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <vector>

namespace hart {

struct latency_histogram {
  /// 0.5 ms to 100 s in 1-2.5-5 steps: a tiny model's decode step to a long prefill's TTFT.
  static const std::vector<double>& default_bounds();

  std::vector<double> bounds = default_bounds();  ///< ascending upper bounds, seconds
  std::vector<uint64_t> counts = std::vector<uint64_t>(bounds.size() + 1);  ///< per bucket; the last is +Inf
  double sum = 0;
  uint64_t count = 0;

  void add(double seconds);
  /// Observations <= bounds[i] (i == bounds.size(): all of them).
  uint64_t cumulative(size_t i) const;
  /// One bound more than counts, finite ascending bounds, count the counts' total: a histogram
  /// decoded from outside bytes is checked with this.
  status validate() const;
};

}  // namespace hart
