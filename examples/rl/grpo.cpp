#include "examples/rl/grpo.h"

#include <cmath>
#include <optional>

namespace hart::rl {

status grpo_options::validate() const {
  if (!(lr > 0)) return invalid_argument("grpo: lr %g must be > 0", lr);
  if (!(clip_eps > 0 && clip_eps < 1))
    return invalid_argument("grpo: clip_eps %g must be in (0, 1)", clip_eps);
  if (!(max_grad_norm >= 0) || !(weight_decay >= 0)) {
    return invalid_argument("grpo: max_grad_norm %g and weight_decay %g must be >= 0", max_grad_norm,
                            weight_decay);
  }
  if (!(temperature > 0)) return invalid_argument("grpo: temperature %g must be > 0", temperature);
  return {};
}

std::vector<std::vector<double>> grpo_advantages(const std::vector<std::vector<double>>& rewards) {
  std::vector<std::vector<double>> adv(rewards.size());
  for (size_t g = 0; g < rewards.size(); ++g) {
    const std::vector<double>& r = rewards[g];
    double mean = 0, var = 0;
    for (double x : r) mean += x;
    mean /= double(std::max<size_t>(r.size(), 1));
    for (double x : r) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / double(std::max<size_t>(r.size(), 1)));
    adv[g].resize(r.size(), 0.0);
    if (sd < 1e-9) continue;
    for (size_t i = 0; i < r.size(); ++i) adv[g][i] = (r[i] - mean) / (sd + 1e-6);
  }
  return adv;
}

grpo_trainer::grpo_trainer(std::shared_ptr<training::v4_model> model, const grpo_options& opt)
    : model_(std::move(model)), opt_(opt) {
  for (const auto& kv : model_->named_parameters()) {
    if (kv.value().requires_grad()) params_.push_back(kv.value());
  }
  adamw_ = std::make_unique<torch::optim::AdamW>(
      params_, torch::optim::AdamWOptions(opt_.lr).betas({0.9, 0.99}).weight_decay(opt_.weight_decay));
}

status_or<std::unique_ptr<grpo_trainer>> grpo_trainer::create(std::shared_ptr<training::v4_model> model,
                                                              const grpo_options& opt) {
  HART_RETURN_IF_ERROR(opt.validate());
  if (!model) return invalid_argument("grpo: no model");
  for (const auto& kv : model->named_parameters()) {
    if (kv.value().scalar_type() != torch::kFloat32) {
      return invalid_argument("grpo: parameter '%s' is not fp32", kv.key().c_str());
    }
  }
  return std::unique_ptr<grpo_trainer>(new grpo_trainer(std::move(model), opt));
}

// The rollouts' routing over ids [N, S] when every sample carries it (each
// covers its prompt + completion but the last token; forced_routing_from pads
// the rest); nullopt when a sample has none.
status_or<std::optional<training::forced_routing>> grpo_trainer::replay_routing(
    const std::vector<grpo_sample>& batch, int64_t S) const {
  std::vector<protocol::routing_info> rows;
  for (size_t b = 0; b < batch.size(); ++b) {
    const grpo_sample& s = batch[b];
    if (s.routing.positions == 0) return std::optional<training::forced_routing>();
    const int64_t len = int64_t(s.prompt.size() + s.completion.size());
    if (int64_t(s.routing.positions) != len - 1) {
      return invalid_argument("grpo: sample %zu's routing covers %u positions, its tokens %lld", b,
                              s.routing.positions, (long long)len);
    }
    rows.push_back(s.routing);
  }
  HART_ASSIGN_OR_RETURN(training::forced_routing f, training::forced_routing_from(rows, S));
  HART_RETURN_IF_ERROR(model_->check_forced(f, int64_t(batch.size()), S));
  return std::optional<training::forced_routing>(std::move(f));
}

status_or<grpo_stats> grpo_trainer::step(const std::vector<grpo_sample>& batch) {
  const int64_t N = int64_t(batch.size()), V = model_->config().vocab_size;
  if (N == 0) return invalid_argument("grpo: empty batch");
  int64_t S = 0;
  for (int64_t b = 0; b < N; ++b) {
    const grpo_sample& s = batch[b];
    if (s.prompt.empty() || s.completion.empty()) {
      return invalid_argument("grpo: sample %lld has %zu prompt and %zu completion tokens (need >= 1 each)",
                              (long long)b, s.prompt.size(), s.completion.size());
    }
    if (s.rollout_logprobs.size() != s.completion.size()) {
      return invalid_argument("grpo: sample %lld has %zu completion tokens but %zu rollout log-probs",
                              (long long)b, s.completion.size(), s.rollout_logprobs.size());
    }
    S = std::max<int64_t>(S, int64_t(s.prompt.size() + s.completion.size()));
  }
  // ids [N, S] right-padded with token 0 (the pass is causal: padding never
  // changes earlier positions); per target position t: the sampled token at
  // t, its rollout log-prob, advantage and a mask.
  torch::Tensor ids = torch::zeros({N, S}, torch::kLong);
  torch::Tensor lp_roll = torch::zeros({N, S}, torch::kFloat32), mask = torch::zeros({N, S}, torch::kFloat32);
  torch::Tensor adv = torch::zeros({N, 1}, torch::kFloat32);
  auto id_a = ids.accessor<int64_t, 2>();
  auto lp_a = lp_roll.accessor<float, 2>();
  auto m_a = mask.accessor<float, 2>();
  for (int64_t b = 0; b < N; ++b) {
    const grpo_sample& s = batch[b];
    int64_t t = 0;
    for (uint32_t id : s.prompt) id_a[b][t++] = id;
    for (size_t i = 0; i < s.completion.size(); ++i, ++t) {
      id_a[b][t] = s.completion[i];
      lp_a[b][t] = s.rollout_logprobs[i];
      m_a[b][t] = 1.0f;
    }
    adv[b][0] = float(s.advantage);
  }
  if (ids.max().item<int64_t>() >= V)
    return invalid_argument("grpo: a token id is outside the vocabulary of %lld", (long long)V);
  try {
    model_->train();
    // logits at t-1 predict the token at t.
    HART_ASSIGN_OR_RETURN(std::optional<training::forced_routing> forced, replay_routing(batch, S));
    torch::Tensor logits = model_->forward(ids, forced ? &*forced : nullptr).to(torch::kFloat32) /
                           opt_.temperature;                                  // [N, S, V]
    torch::Tensor logp = torch::log_softmax(logits.narrow(1, 0, S - 1), -1);  // [N, S-1, V]
    torch::Tensor target = ids.narrow(1, 1, S - 1).unsqueeze(-1);
    torch::Tensor lp_train = logp.gather(-1, target).squeeze(-1);  // [N, S-1]
    torch::Tensor m = mask.narrow(1, 1, S - 1), lp_r = lp_roll.narrow(1, 1, S - 1);
    const double n_tok = m.sum().item<double>();
    torch::Tensor d = lp_train - lp_r;  // log(trainer / rollout)
    torch::Tensor ratio = torch::exp(d);
    torch::Tensor clipped = torch::clamp(ratio, 1.0 - opt_.clip_eps, 1.0 + opt_.clip_eps);
    torch::Tensor surrogate = torch::min(ratio * adv, clipped * adv);
    torch::Tensor loss = -(surrogate * m).sum() / n_tok;

    grpo_stats st;
    st.n_tokens = int64_t(n_tok);
    st.loss = loss.item<double>();
    {
      torch::NoGradGuard ng;
      torch::Tensor dd = d.detach();
      st.logprob_gap = (dd.abs() * m).sum().item<double>() / n_tok;
      st.kl = ((torch::exp(dd) - 1 - dd) * m).sum().item<double>() / n_tok;
      st.clip_frac =
          (((ratio.detach() - clipped.detach()).abs() > 0).to(torch::kFloat32) * m).sum().item<double>() /
          n_tok;
    }
    adamw_->zero_grad();
    loss.backward();
    st.grad_norm =
        torch::nn::utils::clip_grad_norm_(params_, opt_.max_grad_norm > 0 ? opt_.max_grad_norm : 1e30);
    adamw_->step();
    return st;
  } catch (const c10::Error& e) {
    return internal_error("grpo: step: %s", e.what_without_backtrace());
  }
}

std::vector<tensor_ref> grpo_trainer::push_tensors() {
  torch::NoGradGuard ng;
  push_copies_.clear();
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& kv : model_->named_parameters()) all.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model_->named_buffers()) all.emplace_back(kv.key(), kv.value());
  std::vector<tensor_ref> refs;
  for (auto& [name, t] : all) {
    const bool fp = t.is_floating_point();
    torch::Tensor c = (fp ? t.detach().to(torch::kBFloat16) : t.detach().to(torch::kInt64)).contiguous();
    push_copies_.push_back(c);
    // A trainer on a GPU of the server's host hands its tensors over by CUDA IPC (protocol §8).
    refs.push_back({name, fp ? dtype::bf16 : dtype::i64, c.sizes().vec(), c.data_ptr(), size_t(c.nbytes()),
                    c.is_cuda()});
  }
  return refs;
}

}  // namespace hart::rl
