// hot_kernels_bench: issue 6's three hot kernels in one binary — Lightning
// top-k (T1), the Flash compressor (C1) and sparse decode attention (A1). Each
// checks its CUDA path against the CPU reference on fresh random inputs, then
// times its cases and prints its own table; the summary (size, time, floor,
// % of floor, peer) comes last. Built and run by scripts/gpu/bench_hot_kernels.sh,
// which times the PyTorch peers in the same call:
//   hot_kernels_bench [--topk-peer F] [--compressor-peer F] [--attention-peer F]
#include "kernels/testing/hot_bench_summary.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

// One bench's argv: its name, then its peer file when there is one.
int run_bench(int (*bench_main)(int, char**), const char* name, const std::string& peer) {
  std::vector<std::string> args = {name};
  if (!peer.empty()) args.push_back(peer);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::printf("\n=== %s\n", name);
  std::fflush(stdout);
  const int rc = bench_main(int(args.size()), argv.data());
  std::fflush(stdout);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::string topk_peer, compressor_peer, attention_peer;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--topk-peer") == 0 && has_value) {
      topk_peer = argv[++i];
    } else if (std::strcmp(argv[i], "--compressor-peer") == 0 && has_value) {
      compressor_peer = argv[++i];
    } else if (std::strcmp(argv[i], "--attention-peer") == 0 && has_value) {
      attention_peer = argv[++i];
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--topk-peer FILE] [--compressor-peer FILE] [--attention-peer FILE]\n"
          "Checks and times Lightning top-k, the Flash compressor and sparse decode attention on the GPU;\n"
          "the peer files are what scripts/gpu/peers/*.py print.\n",
          argv[0]);
      return 2;
    }
  }
  int failed = 0;
  failed += run_bench(lightning_topk_bench_main, "lightning_topk", topk_peer) != 0;
  failed += run_bench(flash_compressor_bench_main, "flash_compressor", compressor_peer) != 0;
  failed += run_bench(sparse_decode_attention_bench_main, "sparse_decode_attention", attention_peer) != 0;
  std::printf(
      "\nHot kernels (issue 6): time = per-call CUDA events, launch included; floor = bytes / 4.15 TB/s "
      "(+ a launch for top-k)\n");
  hart::bench::print_summary();
  if (failed) std::printf("\n%d of 3 benches reported a failure\n", failed);
  return failed ? 1 : 0;
}
