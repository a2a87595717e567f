// rl_grpo: a whole RL loop on hart, on CPU. A tiny random V4 model learns to
// sort three digits: a short supervised warm start in training/, then GRPO
// with rollouts from a `hart serve --precision fp8` process this program
// starts, the trainer's weights pushed into it (BF16, re-quantized to fp8
// there) before every step as version = step number, and every sampled
// token's version checked. Writes OUT/rl.csv and OUT/rl.svg after every step,
// OUT/model (the initial checkpoint) and OUT/final (the trained one).
//
//   rl_grpo --out rl-out --steps 80
#include "examples/rl/grpo.h"
#include "examples/rl/rl_report.h"
#include "examples/rl/serve_process.h"
#include "examples/rl/sort_task.h"
#include "rollout/rollout_client.h"
#include "rollout/weight_sync_client.h"
#include "training/checkpoint_io.h"
#include "training/trainer.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace hart::rl {
namespace {

using steady = std::chrono::steady_clock;
double seconds_since(steady::time_point t) {
  return std::chrono::duration<double>(steady::now() - t).count();
}

struct rl_options {
  std::string hart = HART_BINARY;
  std::string out = "rl-out";
  int64_t steps = 80;
  int64_t prompts = 32;    ///< prompts per GRPO step
  uint32_t group = 8;      ///< samples per prompt
  int64_t sft_steps = 12;  ///< short on purpose: GRPO has room to climb
  int64_t sft_batch = 64;
  double sft_lr = 3e-3;
  double lr = 1e-3;
  float temperature = 1.0f;
  uint64_t seed = 1;
  bool routing_replay = false;  ///< force the rollouts' routing in the trainer
};

// Supervised warm start: teacher-forced answers, loss on the answer tokens.
status warm_start(const std::shared_ptr<training::v4_model>& model, const rl_options& o,
                  std::mt19937_64& rng) {
  training::trainer_options to;
  to.lr = o.sft_lr;
  to.weight_decay = 0.0;
  HART_ASSIGN_OR_RETURN(auto tr, training::trainer::create(model, to));
  const auto t0 = steady::now();
  for (int64_t s = 1; s <= o.sft_steps; ++s) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> mask;
    for (int64_t b = 0; b < o.sft_batch; ++b) {
      const sort_example e = sort_task_example(rng);
      tokens.emplace_back(e.prompt.begin(), e.prompt.end());
      tokens.back().insert(tokens.back().end(), e.answer.begin(), e.answer.end());
      mask.emplace_back(e.prompt.size(), 0.0f);
      mask.back().resize(tokens.back().size(), 1.0f);
    }
    HART_ASSIGN_OR_RETURN(double loss, tr->train_step(tokens, mask));
    if (s == 1 || s == o.sft_steps || s % 10 == 0) {
      std::printf("warm start %3lld/%lld: loss %.4f (%.1f s)\n", (long long)s, (long long)o.sft_steps, loss,
                  seconds_since(t0));
    }
  }
  return {};
}

// Every token of every sample must come from the weights pushed for this step.
status check_versions(const rollout_result& r, uint64_t version) {
  for (size_t g = 0; g < r.groups.size(); ++g) {
    for (size_t i = 0; i < r.groups[g].samples.size(); ++i) {
      const rollout_sample& s = r.groups[g].samples[i];
      if (s.finish == protocol::finish_reason::error || s.finish == protocol::finish_reason::abort) {
        return internal_error("prompt %zu sample %zu ended with %s: %s", g, i,
                              s.finish == protocol::finish_reason::error ? "error" : "abort",
                              s.error_message.c_str());
      }
      for (size_t t = 0; t < s.weight_versions.size(); ++t) {
        if (s.weight_versions[t] != version) {
          return data_loss("prompt %zu sample %zu token %zu carries weight version %llu, expected %llu", g, i,
                           t, (unsigned long long)s.weight_versions[t], (unsigned long long)version);
        }
      }
    }
  }
  return {};
}

status run(const rl_options& o) {
  namespace fs = std::filesystem;
  const std::string model_dir = (fs::path(o.out) / "model").string();
  std::mt19937_64 rng(o.seed);

  // A random checkpoint with the task's own vocabulary; the server starts on it.
  HART_RETURN_IF_ERROR(sort_task_write_model_files(model_dir));
  HART_ASSIGN_OR_RETURN(model_config cfg, model_config_load(model_dir));
  auto model = std::make_shared<training::v4_model>(cfg);
  model->init_random(o.seed);
  HART_RETURN_IF_ERROR(training::v4_model_save(*model, model_dir, torch::kFloat32, model_dir));
  HART_RETURN_IF_ERROR(warm_start(model, o, rng));

  HART_ASSIGN_OR_RETURN(auto srv,
                        serve_process::start(o.hart, model_dir, {"--precision", "fp8", "--deterministic"}));
  std::printf("server: %s, weight sync %s (fp8)\n", srv->endpoint().c_str(),
              srv->weight_sync_endpoint().c_str());
  rollout_client_params rp;
  rp.endpoint = srv->endpoint();
  HART_ASSIGN_OR_RETURN(auto rollouts, rollout_client::connect(rp));
  weight_sync_client_params wp;
  wp.endpoint = srv->weight_sync_endpoint();
  HART_ASSIGN_OR_RETURN(auto sync, weight_sync_client::connect(wp));
  grpo_options go;
  go.lr = o.lr;
  go.temperature = o.temperature;
  HART_ASSIGN_OR_RETURN(auto grpo, grpo_trainer::create(model, go));

  const std::string csv = (fs::path(o.out) / "rl.csv").string(), svg = (fs::path(o.out) / "rl.svg").string();
  std::vector<step_record> rows;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto t_step = steady::now();
    step_record rec;
    rec.step = step;
    rec.version = uint64_t(step);
    HART_ASSIGN_OR_RETURN(push_report pushed, sync->push(rec.version, grpo->push_tensors()));
    rec.sync_s = pushed.total_s;

    std::vector<sort_example> examples;
    std::vector<rollout_prompt> prompts;
    for (int64_t i = 0; i < o.prompts; ++i) {
      examples.push_back(sort_task_example(rng));
      rollout_prompt p;
      p.token_ids = examples.back().prompt;
      p.sampling.n = o.group;
      p.sampling.temperature = o.temperature;
      p.sampling.max_new_tokens = uint32_t(k_answer_tokens);
      p.sampling.has_seed = true;
      p.sampling.seed = o.seed * 1000003 + uint64_t(step) * 10007 + uint64_t(i) * o.group;
      p.return_routing = o.routing_replay;
      p.return_indexer_picks = o.routing_replay;
      prompts.push_back(std::move(p));
    }
    const auto t_roll = steady::now();
    HART_ASSIGN_OR_RETURN(rollout_result r, rollouts->generate(prompts));
    rec.rollout_s = seconds_since(t_roll);
    HART_RETURN_IF_ERROR(check_versions(r, rec.version));

    std::vector<std::vector<double>> rewards(r.groups.size());
    int64_t n_samples = 0, n_exact = 0;
    for (size_t g = 0; g < r.groups.size(); ++g) {
      for (const rollout_sample& s : r.groups[g].samples) {
        rewards[g].push_back(sort_task_reward(examples[g], s.token_ids));
        rec.reward_mean += rewards[g].back();
        n_exact += rewards[g].back() == 1.0;
        ++n_samples;
      }
    }
    rec.reward_mean /= double(n_samples);
    rec.accuracy = double(n_exact) / double(n_samples);
    const std::vector<std::vector<double>> adv = grpo_advantages(rewards);
    std::vector<grpo_sample> batch;
    for (size_t g = 0; g < r.groups.size(); ++g) {
      for (size_t i = 0; i < r.groups[g].samples.size(); ++i) {
        const rollout_sample& s = r.groups[g].samples[i];
        batch.push_back({examples[g].prompt, s.token_ids, s.logprobs, adv[g][i], s.routing});
      }
    }
    const auto t_train = steady::now();
    HART_ASSIGN_OR_RETURN(grpo_stats st, grpo->step(batch));
    rec.train_s = seconds_since(t_train);
    rec.logprob_gap = st.logprob_gap;
    rec.kl = st.kl;
    rec.loss = st.loss;
    rec.n_tokens = r.n_tokens;
    rec.step_s = seconds_since(t_step);
    rows.push_back(rec);
    HART_RETURN_IF_ERROR(rl_report_write_csv(csv, rows));
    HART_RETURN_IF_ERROR(rl_report_write_svg(svg, rows));
    std::printf(
        "step %3lld v%llu: reward %.3f exact %.3f | gap %.4f kl %.2e clip %.3f | sync %.3f s rollout %.2f s "
        "train %.2f s step %.2f s\n",
        (long long)step, (unsigned long long)rec.version, rec.reward_mean, rec.accuracy, rec.logprob_gap,
        rec.kl, st.clip_frac, rec.sync_s, rec.rollout_s, rec.train_s, rec.step_s);
    std::fflush(stdout);
  }
  HART_RETURN_IF_ERROR(
      training::v4_model_save(*model, (fs::path(o.out) / "final").string(), torch::kFloat32, model_dir));
  std::printf("reward %.3f -> %.3f over %lld steps; %s, %s\n", rows.front().reward_mean,
              rows.back().reward_mean, (long long)rows.size(), csv.c_str(), svg.c_str());
  return {};
}

}  // namespace
}  // namespace hart::rl

int main(int argc, char** argv) {
  hart::rl::rl_options o;
  CLI::App app{"GRPO on a tiny V4 model with rollouts from hart serve (fp8) and weight sync every step"};
  app.add_option("--hart", o.hart, "The hart binary")->capture_default_str();
  app.add_option("--out", o.out, "Output directory (model, final, rl.csv, rl.svg)")->capture_default_str();
  app.add_option("--steps", o.steps, "GRPO steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--prompts", o.prompts, "Prompts per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--group", o.group, "Samples per prompt (GRPO group)")
      ->check(CLI::Range(2, 256))
      ->capture_default_str();
  app.add_option("--sft-steps", o.sft_steps, "Supervised warm-start steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--sft-batch", o.sft_batch, "Warm-start batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sft-lr", o.sft_lr, "Warm-start learning rate")->capture_default_str();
  app.add_option("--lr", o.lr, "GRPO learning rate")->capture_default_str();
  app.add_option("--temperature", o.temperature, "Rollout temperature (> 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the model, the tasks and the sampling")->capture_default_str();
  app.add_flag("--routing-replay", o.routing_replay,
               "Return the server's expert and indexer decisions with every rollout and force them in the "
               "trainer's forward (docs/rl.md)");
  CLI11_PARSE(app, argc, argv);
  const hart::status s = hart::rl::run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "rl_grpo: error: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
