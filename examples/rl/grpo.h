// File: examples/rl/grpo.h
// GRPO on a training::v4_model: group-normalised advantages, and one AdamW
// step on the clipped policy-gradient loss whose importance ratio is
// trainer / rollout probability of each sampled token (the rollout log-probs
// come from the server, which samples in fp8, so the ratio also corrects the
// fp8 / fp32 mismatch; PPO clipping bounds it). With the rollouts' routing
// (grpo_sample::routing) the trainer's forward takes the server's expert and
// indexer decisions (routing replay). Also hands out the model's tensors in
// BF16 for weight_sync_client::push.
//
//   auto g = grpo_trainer::create(model, {}).value();
//   auto adv = grpo_advantages(rewards);            // rewards[prompt][sample]
//   HART_ASSIGN_OR_RETURN(grpo_stats st, g->step(samples));
//   ws->push(version, g->push_tensors());
#pragma once

#include "rollout/weight_sync_client.h"
#include "runtime/core/status.h"
#include "training/v4_model.h"

#include <memory>
#include <optional>
#include <vector>

namespace hart::rl {

struct grpo_options {
  double lr = 1e-3;
  double clip_eps = 0.2;       ///< ratio clipped to [1 - eps, 1 + eps]
  double max_grad_norm = 1.0;  ///< 0 = no clipping
  double weight_decay = 0.0;
  /// The rollouts' sampling temperature: trainer log-probs are taken of
  /// softmax(logits / T), the distribution the server sampled and reported.
  double temperature = 1.0;

  status validate() const;
};

/// One sampled completion and what the rollout reported for it.
struct grpo_sample {
  std::vector<uint32_t> prompt;
  std::vector<uint32_t> completion;     ///< sampled tokens (eos included when sampled)
  std::vector<float> rollout_logprobs;  ///< one per completion token
  double advantage = 0;
  /// The rollout's routing (rollout_prompt::return_routing): when every sample
  /// of a step has one, the trainer's forward takes those decisions.
  protocol::routing_info routing;
};

struct grpo_stats {
  double loss = 0;         ///< clipped surrogate, mean over completion tokens
  double logprob_gap = 0;  ///< mean |lp_trainer - lp_rollout| before the update
  double kl = 0;           ///< k3 estimate of KL(rollout || trainer) before the update
  double clip_frac = 0;    ///< tokens whose ratio was clipped
  double grad_norm = 0;    ///< before clipping
  int64_t n_tokens = 0;
};

/// rewards[g][i] -> (r - mean_g) / (std_g + 1e-6); a group whose rewards are
/// all equal gets advantage 0 (it carries no signal).
std::vector<std::vector<double>> grpo_advantages(const std::vector<std::vector<double>>& rewards);

class grpo_trainer {
 public:
  /// `model` must hold fp32 parameters. invalid_argument for bad options.
  static status_or<std::unique_ptr<grpo_trainer>> create(std::shared_ptr<training::v4_model> model,
                                                         const grpo_options& opt);

  /// One optimizer step on `batch`. invalid_argument for an empty batch, a
  /// sample without completion tokens, mismatched log-prob counts or token
  /// ids outside the vocabulary.
  status_or<grpo_stats> step(const std::vector<grpo_sample>& batch);

  /// Every parameter and buffer under its canonical name, floating ones in
  /// BF16 (what a trainer sends; the server re-quantizes to fp8). The bytes
  /// stay valid until the next call.
  std::vector<tensor_ref> push_tensors();

 private:
  grpo_trainer(std::shared_ptr<training::v4_model> model, const grpo_options& opt);

  status_or<std::optional<training::forced_routing>> replay_routing(const std::vector<grpo_sample>& batch,
                                                                    int64_t S) const;

  std::shared_ptr<training::v4_model> model_;
  grpo_options opt_;
  std::vector<torch::Tensor> params_;  ///< trainable ones
  std::unique_ptr<torch::optim::AdamW> adamw_;
  std::vector<torch::Tensor> push_copies_;  ///< bytes behind the last push_tensors()
};

}  // namespace hart::rl
