// The fuzz targets (fuzz/targets.h) in CI: every committed corpus input and every seed, then
// deterministic mutations of each (bit flips, truncations, overwrites with 0x00 / 0xff,
// insertions, repeated slices), run through each decoder. A crash fails the suite; under
// scripts/fuzz.sh's sanitizer build so does any ASan / UBSan report. libFuzzer itself
// (coverage-guided, millions of inputs) runs from scripts/fuzz.sh, which also grows the corpus.
#include "fuzz/targets.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart::fuzz {
namespace {

// The regular files of a gzipped ustar archive, in archive order (scripts/fuzz.sh writes them sorted).
std::vector<std::string> tar_gz_files(const std::string& path) {
  std::string bytes;
  if (gzFile gz = gzopen(path.c_str(), "rb")) {
    char buf[65536];
    for (int n; (n = gzread(gz, buf, sizeof buf)) > 0;) bytes.append(buf, size_t(n));
    gzclose(gz);
  }
  std::vector<std::string> files;
  for (size_t at = 0; at + 512 <= bytes.size();) {
    const char* h = bytes.data() + at;
    if (h[0] == '\0') break;  // the end-of-archive blocks
    const size_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    at += 512;
    if ((h[156] == '0' || h[156] == '\0') && at + size <= bytes.size())
      files.push_back(bytes.substr(at, size));
    at += (size + 511) / 512 * 512;
  }
  return files;
}

// The seeds and the committed corpus (fuzz/corpus/<target>.tar.gz: one archive per target, so the
// tree does not carry thousands of tiny files).
std::vector<std::string> corpus_of(const target& t) {
  std::vector<std::string> inputs = t.seeds();
  for (std::string& f : tar_gz_files(std::string(HART_FUZZ_CORPUS) + "/" + t.name + ".tar.gz"))
    inputs.push_back(std::move(f));
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
      case 1:
        s.resize(pick(s.size() + 1));
        break;
      case 2:
        if (!s.empty()) s[pick(s.size())] = (rng() & 1) ? '\0' : '\xff';
        break;
      case 3:
        s.insert(pick(s.size() + 1), 1 + pick(8), char(rng()));
        break;
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
    EXPECT_TRUE(t->run(reinterpret_cast<const uint8_t*>(seed.data()), seed.size()))
        << t->name << " refused a seed";
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
