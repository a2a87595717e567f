#include "runtime/core/histogram.h"

#include <algorithm>
#include <cmath>

namespace hart {

const std::vector<double>& latency_histogram::default_bounds() {
  static const std::vector<double> b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,    1,     2.5,    5,     10,   25,    50,   100};
  return b;
}

void latency_histogram::add(double seconds) {
  const size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin());
  ++counts[i];
  sum += seconds;
  ++count;
}

uint64_t latency_histogram::cumulative(size_t i) const {
  uint64_t n = 0;
  for (size_t k = 0; k <= i && k < counts.size(); ++k) n += counts[k];
  return n;
}

status latency_histogram::validate() const {
  if (counts.size() != bounds.size() + 1)
    return invalid_argument("histogram: %zu counts for %zu bounds (one more expected)", counts.size(),
                            bounds.size());
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
      return invalid_argument("histogram: bound %zu is not finite and above the one before", i);
  }
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total != count)
    return invalid_argument("histogram: counts add up to %llu, count is %llu", (unsigned long long)total,
                            (unsigned long long)count);
  return {};
}

}  // namespace hart
