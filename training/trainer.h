// File: training/trainer.h
// Trainer basics for a v4_model: next-token cross-entropy over a masked batch,
// AdamW on the trainable parameters (fp32 master weights; the forward may run
// in bf16), gradient-norm clipping, and checkpoints that resume exactly
// (weights as safetensors, optimizer state as a LibTorch archive).
//
//   trainer_options opt;
//   opt.lr = 1e-4;
//   HART_ASSIGN_OR_RETURN(auto tr, training::trainer::create(model, opt));
//   HART_ASSIGN_OR_RETURN(double loss, tr->train_step(tokens, mask));
//   HART_RETURN_IF_ERROR(tr->save("/ckpt/step-100", "tests/data/tiny-a"));
#pragma once

#include "runtime/core/status.h"
#include "training/v4_model.h"

#include <memory>
#include <string>
#include <vector>

namespace hart::training {

struct trainer_options {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;                    // 0 = no clipping
  torch::Dtype compute_dtype = torch::kFloat32;  // kBFloat16: bf16 forward, fp32 master weights

  status validate() const;
};

class trainer {
 public:
  /// `model` must hold fp32 parameters; it is shared with the caller and its
  /// compute dtype is set from `opt`. Bad options are invalid_argument.
  static status_or<std::unique_ptr<trainer>> create(std::shared_ptr<v4_model> model,
                                                    const trainer_options& opt);

  /// One optimizer step. tokens [B][S] (equal lengths; right-pad and mask
  /// the padding), mask [B][S]: weight of predicting tokens[b][s] from the
  /// prefix before it (mask[b][0] is ignored). Returns the mean masked
  /// negative log-likelihood before the update. The clipped gradients stay
  /// in the parameters' .grad() until the next step.
  status_or<double> train_step(const std::vector<std::vector<int32_t>>& tokens,
                               const std::vector<std::vector<float>>& mask);

  /// The loss train_step would report, without gradients or an update.
  status_or<double> eval_loss(const std::vector<std::vector<int32_t>>& tokens,
                              const std::vector<std::vector<float>>& mask);

  /// Gradient norm before clipping, of the last step.
  double last_grad_norm() const { return last_grad_norm_; }
  int64_t step() const { return step_; }

  /// `dir`/model.safetensors (fp32) + config files from `config_dir` +
  /// `dir`/optimizer.pt (AdamW moments and step counts).
  status save(const std::string& dir, const std::string& config_dir) const;
  /// Restores weights and optimizer state written by save().
  status load(const std::string& dir);

 private:
  trainer(std::shared_ptr<v4_model> model, const trainer_options& opt);
  status_or<torch::Tensor> loss_of(const std::vector<std::vector<int32_t>>& tokens,
                                   const std::vector<std::vector<float>>& mask);

  std::shared_ptr<v4_model> model_;
  trainer_options opt_;
  std::vector<torch::Tensor> params_;  // trainable parameters, in named_parameters() order
  std::unique_ptr<torch::optim::AdamW> adamw_;
  double last_grad_norm_ = 0;
  int64_t step_ = 0;
};

}  // namespace hart::training
