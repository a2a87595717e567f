// The fuzz targets (fuzz/targets.h) in CI: every committed corpus input and every seed, then
// deterministic mutations of each (bit flips, truncations, overwrites with 0x00 / 0xff,
// insertions, repeated slices), run through each decoder. A crash fails the suite; under
// scripts/fuzz.sh's sanitizer build so does any ASan / UBSan report. libFuzzer itself
// (coverage-guided, millions of inputs) runs from scripts/fuzz.sh, which also grows the corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace hart::fuzz {
namespace {

std::vector<std::string> corpus_of(const target& t) {
  std::vector<std::string> inputs = t.seeds();
  const std::filesystem::path dir = std::filesystem::path(HART_FUZZ_CORPUS) / t.name;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return inputs;
}

std::string mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  const auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= char(1 << (rng() % 8));
        break;
      case 1: s.resize(pick(s.size() + 1)); break;
      case 2:
        if (!s.empty()) s[pick(s.size())] = (rng() & 1) ? '\0' : '\xff';
        break;
      case 3: s.insert(pick(s.size() + 1), 1 + pick(8), char(rng())); break;
      case 4:
        if (!s.empty()) {
          const size_t at = pick(s.size()), len = 1 + pick(std::min<size_t>(64, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, len));
        }
        break;
      default:  // a 4- or 8-byte field set to an extreme (lengths, counts, offsets)
        if (s.size() >= 8) {
          const size_t at = pick(s.size() - 7);
          const uint64_t v = (rng() & 1) ? ~uint64_t(0) : (uint64_t(1) << (rng() % 64));
          std::memcpy(&s[at], &v, (rng() & 1) ? 4 : 8);
        }
    }
  }
  return s;
}

class fuzz_replay : public ::testing::TestWithParam<std::string> {};

TEST_P(fuzz_replay, corpus_and_mutations_only_ever_return) {
  const target* t = find_target(GetParam());
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> inputs = corpus_of(*t);
  ASSERT_FALSE(inputs.empty()) << "no seeds for " << t->name;
  std::mt19937_64 rng(20261202);
  // Per target, at most ~4 s of mutations on a slow CI core; every input at least once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  size_t runs = 0, accepted = 0;
  for (const std::string& seed : t->seeds()) {  // the seeds are well-formed: the decoder takes them
    EXPECT_TRUE(t->run(reinterpret_cast<const uint8_t*>(seed.data()), seed.size())) << t->name << " refused a seed";
  }
  for (const std::string& in : inputs) {
    accepted += t->run(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    ++runs;
  }
  for (size_t i = 0; i < 200000 && std::chrono::steady_clock::now() < deadline; ++i) {
    const std::string m = mutate(inputs[i % inputs.size()], rng);
    accepted += t->run(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    ++runs;
  }
  EXPECT_FALSE(t->run(nullptr, 0));
  std::printf("%s: %zu corpus inputs, %zu runs, %zu accepted\n", t->name, inputs.size(), runs, accepted);
}

std::vector<std::string> names() {
  std::vector<std::string> v;
  for (const target& t : targets()) v.push_back(t.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(targets, fuzz_replay, ::testing::ValuesIn(names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hart::fuzz
