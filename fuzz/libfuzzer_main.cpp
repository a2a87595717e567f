// libFuzzer's entry point for one target of fuzz/targets.h, chosen at build time
// (HART_FUZZ_TARGET, one executable per target: scripts/fuzz.sh). An empty corpus directory
// (the first argument that is not a flag) gets the target's seeds first.
#include "fuzz/targets.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {
const hart::fuzz::target* the_target() {
  static const hart::fuzz::target* t = [] {
    const hart::fuzz::target* found = hart::fuzz::find_target(HART_FUZZ_TARGET);
    if (!found) {
      std::fprintf(stderr, "no fuzz target %s\n", HART_FUZZ_TARGET);
      std::abort();
    }
    return found;
  }();
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  namespace fs = std::filesystem;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = (*argv)[i];
    if (a.empty() || a[0] == '-') continue;
    std::error_code ec;
    if (fs::is_directory(a, ec) && fs::is_empty(a, ec)) {
      int n = 0;
      for (const std::string& seed : the_target()->seeds()) {
        std::ofstream(a + "/seed-" + std::to_string(n++), std::ios::binary) << seed;
      }
    }
    break;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)the_target()->run(data, size);
  return 0;
}
