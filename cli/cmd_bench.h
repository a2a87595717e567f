// File: cli/cmd_bench.h — `hart bench`: a V4-Flash-shaped model with
// random weights on the GPU engine, prefill and decode timed at each (batch,
// context), one table with the memory floor beside each time (issue 5 item 6,
// targets D1/D2 in perf-targets.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hart::cli {

struct bench_options {
  std::string device = "cuda";
  std::string config_dir = "configs/deepseek-v4-flash";  // dims taken from its config.json
  int64_t layers = 4;                                    // SWA, CSA, HCA, CSA, then CSA/HCA alternating
  int64_t hash_layers = 1;                               // leading hash-routed layers (Flash: 3 of 43)
  std::vector<int64_t> batch = {1, 8, 32, 128, 256};
  std::vector<std::string> context = {"4096", "65536", "262144", "1048576"};
  std::string prec = "fp8";
  int64_t steps = 20;           // timed decode steps per point (median)
  int64_t warmup = 3;           // untimed decode steps first (their routing traces give the touched experts)
  int64_t prefill_chunk = 512;  // tokens per sequence in the timed prefill call (0 = no prefill rows)
  int64_t prefill_max_tokens = 8192;  // prefill rows only where batch × chunk ≤ this
  int64_t prefill_reps = 3;
  uint64_t seed = 1;
  bool enforce_eager = false;   // decode kernel by kernel (the default replays CUDA graphs)
  bool fp8_cuda_cores = false;  // every FP8 linear on CUDA cores (the default puts >= 2 rows on tensor cores)
  int64_t fp8_cublaslt_rows =
      0;  // FP8 linears of >= this many rows through cuBLASLt; 0 = never (the engine's default)
  bool fp32_kv = false;  // fp32 KV rows and the gathered fp32 attention (default: FP8 entries and A1)
  std::string experts = "mxfp4";  // routed experts: mxfp4 (the release form; fp8 with tensor cores) or fp8
};

/// Adds `hart bench` and its options (into `*o`) to `app`.
CLI::App* add_bench_command(CLI::App& app, bench_options* o);

/// 0 when every point ran or was skipped with a note; 1 on error or no device.
int run_bench(const bench_options& o);

}  // namespace hart::cli
