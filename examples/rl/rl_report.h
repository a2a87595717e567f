// File: examples/rl/rl_report.h
// Per-step numbers of the RL example, written as CSV (one row per step) and
// as a hand-written SVG plot: reward and exact-answer rate on top, the
// rollout/trainer log-prob gap below. Both files are rewritten after every
// step, so a run cut short still leaves them complete.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hart::rl {

struct step_record {
  int64_t step = 0;
  uint64_t version = 0;    ///< weight version the step's rollouts ran on
  double reward_mean = 0;  ///< mean reward over all samples, [0, 1]
  double accuracy = 0;     ///< fraction of samples with the exact answer
  double logprob_gap = 0;  ///< mean |trainer - rollout| log-prob over sampled tokens
  double kl = 0;           ///< KL(rollout || trainer) on sampled tokens (k3 estimator)
  double loss = 0;         ///< the clipped policy-gradient loss
  double sync_s = 0;       ///< weight push: begin -> new version serving
  double rollout_s = 0;
  double train_s = 0;
  double step_s = 0;
  int64_t n_tokens = 0;  ///< sampled tokens
};

/// Header + one row per record; overwrites `path`.
status rl_report_write_csv(const std::string& path, const std::vector<step_record>& rows);

/// Two panels over the steps; overwrites `path`.
status rl_report_write_svg(const std::string& path, const std::vector<step_record>& rows);

}  // namespace hart::rl
