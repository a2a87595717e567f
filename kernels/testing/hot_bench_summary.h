// File: kernels/testing/hot_bench_summary.h — the one table of issue 6's hot
// kernels (Lightning top-k T1, Flash compressor C1, sparse decode attention A1).
// Each kernel's bench (X_bench.cu) prints its own detailed table and adds one
// summary row per case here; hot_kernels_bench.cu runs all three in one binary
// and prints the summary last. Built alone (its script's nvcc line), a bench
// keeps its own main; with HART_HOT_KERNELS_BENCH defined it leaves main to
// hot_kernels_bench.cu.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace hart::bench {

struct summary_row {
  std::string kernel, size;  // e.g. "T1 top-k", "batch 1, n 256K, k 512"
  double us = 0, floor_us = 0;
  std::string peer, peer_us;  // "torch.topk", "31.2" ("-" when not measured)
  bool ok = true;             // false: the case failed its check against the CPU reference
};

inline std::vector<summary_row>& summary() {
  static std::vector<summary_row> rows;
  return rows;
}

inline void print_summary() {
  std::printf(
      "\n| kernel | size | time us | floor us | %% of floor | peer | peer us "
      "|\n|---|---|---|---|---|---|---|\n");
  for (const summary_row& r : summary()) {
    if (!r.ok) {
      std::printf("| %s | %s | FAILED CHECK | %.2f | - | %s | %s |\n", r.kernel.c_str(), r.size.c_str(),
                  r.floor_us, r.peer.c_str(), r.peer_us.c_str());
      continue;
    }
    std::printf("| %s | %s | %.2f | %.2f | %.0f%% | %s | %s |\n", r.kernel.c_str(), r.size.c_str(), r.us,
                r.floor_us, 100.0 * r.floor_us / r.us, r.peer.c_str(), r.peer_us.c_str());
  }
}

}  // namespace hart::bench

// The three benches' entry points (argv as each one's own binary takes it).
int lightning_topk_bench_main(int argc, char** argv);
int flash_compressor_bench_main(int argc, char** argv);
int sparse_decode_attention_bench_main(int argc, char** argv);
