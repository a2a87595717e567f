// The RL example end to end (CI smoke): rl_grpo with a real `hart serve
// --precision fp8` process for a few GRPO steps; the CSV must show every step
// on its own weight version, a small finite log-prob gap, a measured sync, and
// a reward above where it started. Plus the task's pieces: its vocabulary
// loads as a hart tokenizer and config, and the reward scores positions.
#include "examples/rl/sort_task.h"
#include "runtime/model/config.h"
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hart::rl {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("hart_rl_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

TEST(SortTask, ModelFilesLoadAndRewardScoresPositions) {
  const fs::path dir = temp_dir("files");
  ASSERT_TRUE(sort_task_write_model_files(dir.string()).ok());
  auto cfg = model_config_load(dir.string());
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  EXPECT_TRUE(cfg->validate().ok());
  EXPECT_EQ(cfg->vocab_size, k_vocab_size);
  auto tok = tokenizer::load((dir / "tokenizer.json").string());
  ASSERT_TRUE(tok.ok()) << tok.get_status().to_string();
  EXPECT_EQ(tok->vocab_size(), k_vocab_size);
  auto text = tok->decode({2, 3, 4, 5, 6, 7, 8, 9, 10, 11, int32_t(k_equals)});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "0123456789=");

  std::mt19937_64 rng(3);
  for (int i = 0; i < 50; ++i) {
    const sort_example e = sort_task_example(rng);
    ASSERT_EQ(e.prompt.size(), 5u);
    ASSERT_EQ(e.answer.size(), k_answer_tokens);
    EXPECT_TRUE(e.answer[0] <= e.answer[1] && e.answer[1] <= e.answer[2]);
    EXPECT_EQ(e.answer[3], k_eos);
    EXPECT_EQ(sort_task_reward(e, e.answer), 1.0);
    EXPECT_EQ(sort_task_reward(e, {}), 0.0);
    EXPECT_EQ(sort_task_reward(e, {e.answer[0], e.answer[1]}), 0.5);
  }
  fs::remove_all(dir);
}

std::vector<std::vector<double>> read_csv(const fs::path& path, std::string* header) {
  std::ifstream f(path);
  std::getline(f, *header);
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(f, line);) {
    std::vector<double> row;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

// Runs rl_grpo for `steps` into `out` with `extra` flags; its exit code, log in *log_text.
int run_rl_grpo(const fs::path& out, int steps, const std::string& extra, std::string* log_text) {
  const std::string cmd = std::string(RL_GRPO_BINARY) + " --hart " + HART_BINARY + " --out " + out.string() +
                          " --steps " + std::to_string(steps) + extra + " > " + (out.string() + ".log") +
                          " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(out.string() + ".log");
  log_text->assign((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  return rc;
}

TEST(RlGrpo, RewardClimbsWithFp8RolloutsAndVersionedWeights) {
  const fs::path out = temp_dir("smoke");
  const int steps = 12;
  std::string log_text;
  ASSERT_EQ(run_rl_grpo(out, steps, "", &log_text), 0) << log_text;
  std::string header;
  const auto rows = read_csv(out / "rl.csv", &header);
  ASSERT_EQ(header.rfind("step,version,reward_mean,accuracy,logprob_gap_mean_abs,kl_rollout_trainer,", 0), 0u)
      << header;
  ASSERT_EQ(rows.size(), size_t(steps)) << log_text;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<double>& r = rows[i];
    ASSERT_EQ(r.size(), 12u);
    EXPECT_EQ(r[0], double(i + 1));
    EXPECT_EQ(r[1], double(i + 1)) << "weight version of step " << i + 1;
    // fp8 rollouts vs the fp32 trainer: close, but not identical.
    EXPECT_TRUE(std::isfinite(r[4]) && r[4] > 0 && r[4] < 0.1) << "gap " << r[4];
    EXPECT_TRUE(std::isfinite(r[5]) && r[5] >= 0 && r[5] < 0.05) << "kl " << r[5];
    EXPECT_GT(r[7], 0) << "sync_s";
    EXPECT_GT(r[11], 0) << "tokens";
  }
  const double first = rows.front()[2];
  const double last3 = (rows[steps - 1][2] + rows[steps - 2][2] + rows[steps - 3][2]) / 3;
  EXPECT_GT(last3, first + 0.05) << log_text;
  std::ifstream svg(out / "rl.svg");
  const std::string svg_text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg_text.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg_text.find("<polyline"), std::string::npos);
  EXPECT_NE(svg_text.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg_text.find("t<polyline"), std::string::npos) << "a truncated element";
  EXPECT_TRUE(fs::exists(out / "final" / "model.safetensors"));
  fs::remove_all(out);
  fs::remove(out.string() + ".log");
}

// --routing-replay: rollouts return their routing and the trainer forces it;
// the loop runs and the gap stays at fp8-vs-fp32 size (a wrong replay, e.g.
// routing shifted by a position, shows as a gap of order 1).
TEST(RlGrpo, RoutingReplayRuns) {
  const fs::path out = temp_dir("replay");
  const int steps = 3;
  std::string log_text;
  ASSERT_EQ(run_rl_grpo(out, steps, " --routing-replay", &log_text), 0) << log_text;
  std::string header;
  const auto rows = read_csv(out / "rl.csv", &header);
  ASSERT_EQ(rows.size(), size_t(steps)) << log_text;
  for (const std::vector<double>& r : rows) {
    EXPECT_TRUE(std::isfinite(r[4]) && r[4] > 0 && r[4] < 0.1) << "gap " << r[4];
    EXPECT_TRUE(std::isfinite(r[5]) && r[5] >= 0 && r[5] < 0.05) << "kl " << r[5];
  }
  fs::remove_all(out);
  fs::remove(out.string() + ".log");
}

}  // namespace
}  // namespace hart::rl
