#include "training/trainer.h"

#include "training/checkpoint_io.h"

#include <filesystem>

namespace hart::training {
namespace {

// LibTorch throws c10::Error; it stops at this boundary (style R28).
template <typename F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return internal_error("%s: %s", what, e.what_without_backtrace());
  }
}

}  // namespace

status trainer_options::validate() const {
  if (!(lr > 0)) return invalid_argument("trainer: lr %g must be > 0", lr);
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
    return invalid_argument("trainer: betas (%g, %g) must be in [0, 1)", beta1, beta2);
  }
  if (!(eps > 0) || !(weight_decay >= 0) || !(max_grad_norm >= 0)) {
    return invalid_argument("trainer: eps %g must be > 0, weight_decay %g and max_grad_norm %g >= 0", eps,
                            weight_decay, max_grad_norm);
  }
  if (compute_dtype != torch::kFloat32 && compute_dtype != torch::kBFloat16) {
    return invalid_argument("trainer: compute dtype must be float32 or bfloat16");
  }
  return {};
}

status_or<std::unique_ptr<trainer>> trainer::create(std::shared_ptr<v4_model> model,
                                                    const trainer_options& opt) {
  HART_RETURN_IF_ERROR(opt.validate());
  if (!model) return invalid_argument("trainer: no model");
  for (const auto& kv : model->named_parameters()) {
    if (kv.value().scalar_type() != torch::kFloat32) {
      return invalid_argument("trainer: parameter '%s' is not fp32 (master weights must be fp32)",
                              kv.key().c_str());
    }
  }
  return guarded("trainer", [&]() -> status_or<std::unique_ptr<trainer>> {
    return std::unique_ptr<trainer>(new trainer(std::move(model), opt));
  });
}

trainer::trainer(std::shared_ptr<v4_model> model, const trainer_options& opt)
    : model_(std::move(model)), opt_(opt) {
  model_->set_compute_dtype(opt_.compute_dtype);
  for (const auto& kv : model_->named_parameters()) {
    if (kv.value().requires_grad()) params_.push_back(kv.value());
  }
  adamw_ = std::make_unique<torch::optim::AdamW>(params_, torch::optim::AdamWOptions(opt_.lr)
                                                              .betas({opt_.beta1, opt_.beta2})
                                                              .eps(opt_.eps)
                                                              .weight_decay(opt_.weight_decay));
}

status_or<torch::Tensor> trainer::loss_of(const std::vector<std::vector<int32_t>>& tokens,
                                          const std::vector<std::vector<float>>& mask) {
  const int64_t B = int64_t(tokens.size()), V = model_->config().vocab_size;
  if (B == 0 || mask.size() != tokens.size()) {
    return invalid_argument("train_step: %zu sequences and %zu mask rows (need the same, > 0)", tokens.size(),
                            mask.size());
  }
  const int64_t S = int64_t(tokens[0].size());
  if (S < 2) return invalid_argument("train_step: sequences need >= 2 tokens, got %lld", (long long)S);
  torch::Tensor ids = torch::empty({B, S}, torch::kLong), m = torch::empty({B, S}, torch::kFloat32);
  for (int64_t b = 0; b < B; ++b) {
    if (int64_t(tokens[b].size()) != S || int64_t(mask[b].size()) != S) {
      return invalid_argument("train_step: row %lld has %zu tokens and %zu mask values, row 0 has %lld",
                              (long long)b, tokens[b].size(), mask[b].size(), (long long)S);
    }
    for (int64_t s = 0; s < S; ++s) {
      const int32_t id = tokens[b][s];
      if (id < 0 || id >= V) {
        return out_of_range("train_step: token %d at (%lld, %lld) is outside the vocabulary [0, %lld)", id,
                            (long long)b, (long long)s, (long long)V);
      }
      ids[b][s] = int64_t(id);
      m[b][s] = mask[b][s];
    }
  }
  torch::Tensor target_mask = m.narrow(1, 1, S - 1);
  const double total = target_mask.sum().item<double>();
  if (!(total > 0)) return invalid_argument("train_step: the mask selects no target token");
  torch::Tensor logits = model_->forward(ids).narrow(1, 0, S - 1);
  torch::Tensor nll =
      -torch::log_softmax(logits, -1).gather(-1, ids.narrow(1, 1, S - 1).unsqueeze(-1)).squeeze(-1);
  return (nll * target_mask.to(nll.scalar_type())).sum() / total;
}

status_or<double> trainer::train_step(const std::vector<std::vector<int32_t>>& tokens,
                                      const std::vector<std::vector<float>>& mask) {
  return guarded("train_step", [&]() -> status_or<double> {
    adamw_->zero_grad();
    HART_ASSIGN_OR_RETURN(torch::Tensor loss, loss_of(tokens, mask));
    loss.backward();
    last_grad_norm_ = opt_.max_grad_norm > 0 ? torch::nn::utils::clip_grad_norm_(params_, opt_.max_grad_norm)
                                             : torch::nn::utils::clip_grad_norm_(params_, INFINITY);
    adamw_->step();
    ++step_;
    return loss.item<double>();
  });
}

status_or<double> trainer::eval_loss(const std::vector<std::vector<int32_t>>& tokens,
                                     const std::vector<std::vector<float>>& mask) {
  return guarded("eval_loss", [&]() -> status_or<double> {
    torch::NoGradGuard no_grad;
    HART_ASSIGN_OR_RETURN(torch::Tensor loss, loss_of(tokens, mask));
    return loss.item<double>();
  });
}

status trainer::save(const std::string& dir, const std::string& config_dir) const {
  HART_RETURN_IF_ERROR(v4_model_save(*model_, dir, torch::kFloat32, config_dir));
  return guarded("trainer save", [&]() -> status {
    torch::serialize::OutputArchive archive;
    adamw_->save(archive);
    archive.write("hart_step", torch::tensor(step_));
    archive.save_to((std::filesystem::path(dir) / "optimizer.pt").string());
    return {};
  });
}

status trainer::load(const std::string& dir) {
  const std::string opt_path = (std::filesystem::path(dir) / "optimizer.pt").string();
  if (!std::filesystem::exists(opt_path))
    return not_found("trainer load: %s does not exist", opt_path.c_str());
  HART_RETURN_IF_ERROR(v4_model_load_weights(*model_, dir));
  return guarded("trainer load", [&]() -> status {
    torch::serialize::InputArchive archive;
    archive.load_from(opt_path);
    adamw_->load(archive);
    torch::Tensor step;
    archive.read("hart_step", step);
    step_ = step.item<int64_t>();
    return {};
  });
}

}  // namespace hart::training
