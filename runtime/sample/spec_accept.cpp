#include "runtime/sample/spec_accept.h"

#include "runtime/core/check.h"

#include <algorithm>
#include <cmath>

namespace hart {
namespace {

// The target's distribution of one row over the whole vocabulary (one-hot at the argmax when greedy,
// as sampler::sample picks).
std::vector<double> target_probs(const float* row, int64_t vocab, const sampling_params& params) {
  std::vector<double> p(size_t(vocab), 0.0);
  if (params.temperature == 0.0f) {
    p[size_t(std::max_element(row, row + vocab) - row)] = 1.0;
    return p;
  }
  const sampling_distribution d = sampling_distribution_of(row, vocab, params);
  for (size_t i = 0; i < d.ids.size(); ++i) p[size_t(d.ids[i])] = d.probs[i];
  return p;
}

// A token drawn from the non-negative weights `w` (not all zero).
int32_t draw(const std::vector<double>& w, std::mt19937_64& rng) {
  double total = 0;
  for (double v : w) total += v;
  const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * total;
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    last = int32_t(i);
    cum += w[i];
    if (r < cum) return last;
  }
  return last;  // r at the top end by rounding
}

}  // namespace

spec_outcome spec_accept(const sampling_params& params, const std::vector<uint64_t>& row_seeds,
                         const float* rows, int64_t vocab, const std::vector<int32_t>& drafts) {
  HART_CHECK(row_seeds.size() == drafts.size() + 1);
  spec_outcome o;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    sampling_params row_params = params;
    row_params.seed = row_seeds[j];
    sampler s(row_params);
    float logprob = 0.0f;
    const int32_t drawn = s.sample(rows + int64_t(j) * vocab, vocab, &logprob);
    o.tokens.push_back(drawn);
    o.logprobs.push_back(logprob);
    if (j == drafts.size() || drawn != drafts[j]) break;  // a rejection, or the bonus token after all k
  }
  return o;
}

spec_outcome spec_accept_sampled(std::mt19937_64& rng, const sampling_params& params, const float* rows,
                                 int64_t vocab, const std::vector<int32_t>& drafts,
                                 const std::vector<sampling_distribution>& q) {
  HART_CHECK(q.size() == drafts.size());
  spec_outcome o;
  auto emit = [&](int32_t token, const std::vector<double>& p) {
    o.tokens.push_back(token);
    o.logprobs.push_back(params.temperature == 0.0f ? 0.0f : float(std::log(p[size_t(token)])));
  };
  for (size_t j = 0; j < drafts.size(); ++j) {
    const std::vector<double> p = target_probs(rows + int64_t(j) * vocab, vocab, params);
    std::vector<double> qd(size_t(vocab), 0.0);
    for (size_t i = 0; i < q[j].ids.size(); ++i) qd[size_t(q[j].ids[i])] = q[j].probs[i];
    const int32_t d = drafts[j];
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    if (qd[size_t(d)] > 0 && u * qd[size_t(d)] < p[size_t(d)]) {  // u < p(d) / q(d)
      emit(d, p);
      continue;
    }
    std::vector<double> residual(static_cast<size_t>(vocab), 0.0);
    double total = 0;
    for (size_t i = 0; i < residual.size(); ++i) total += (residual[i] = std::max(0.0, p[i] - qd[i]));
    emit(draw(qd[size_t(d)] > 0 && total > 0 ? residual : p, rng), p);
    return o;
  }
  const std::vector<double> p = target_probs(rows + int64_t(drafts.size()) * vocab, vocab, params);
  emit(draw(p, rng), p);
  return o;
}

}  // namespace hart
