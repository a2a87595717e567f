// File: examples/rl/sort_task.h
// The RL example's task: sort three digits. Prompt `<bos> d1 d2 d3 =`, answer
// the digits in ascending order then `<eos>`. Its own 16-token vocabulary
// (bos, eos, the ten digits, '=', '+', ',', ' ') and a tiny V4 config are
// written next to the weights, so `hart serve` loads the directory as any
// checkpoint. No LibTorch here.
//
//   sort_task_write_model_files(dir);          // config.json, tokenizer*.json
//   sort_example e = sort_task_example(rng);   // e.prompt, e.answer
//   double r = sort_task_reward(e, sampled);   // in [0, 1]
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hart::rl {

constexpr uint32_t k_bos = 0;
constexpr uint32_t k_eos = 1;
constexpr uint32_t k_digit0 = 2;  ///< digit d is token k_digit0 + d
constexpr uint32_t k_equals = 12;
constexpr int64_t k_vocab_size = 16;
constexpr size_t k_answer_tokens = 4;  ///< three digits + eos

struct sort_example {
  std::vector<uint32_t> prompt;  ///< bos, three digits, '='
  std::vector<uint32_t> answer;  ///< sorted digits, eos
};

/// A uniformly random example.
sort_example sort_task_example(std::mt19937_64& rng);

/// Fraction of the k_answer_tokens answer positions the sample gets right
/// (position by position; missing tokens count wrong). 1 = exact answer.
double sort_task_reward(const sort_example& e, const std::vector<uint32_t>& sampled);

/// Writes config.json (a 2-layer V4: sliding window + CSA with the Lightning
/// Indexer, hash MoE + scored MoE, mHC), generation_config.json, tokenizer.json
/// and tokenizer_config.json into `dir` (created).
status sort_task_write_model_files(const std::string& dir);

}  // namespace hart::rl
