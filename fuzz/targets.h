// File: fuzz/targets.h
// One entry point per decoder that reads bytes from outside the process (issue 27): client
// frames, worker step frames, weight-sync frames, PD-link frames, safetensors headers,
// config.json and tokenizer.json. Each takes any bytes and must only ever return: an error status is fine, a
// crash, hang, leak or sanitizer report is the bug. The same functions run under libFuzzer
// (scripts/fuzz.sh, clang with ASan + UBSan) and in CI over the committed corpus and
// deterministic mutations of it (fuzz_replay_test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hart::fuzz {

struct target {
  const char* name;                               // also the corpus directory: fuzz/corpus/<name>
  bool (*run)(const uint8_t* data, size_t size);  // true: the decoder accepted the input
  std::vector<std::string> (*seeds)();            // well-formed inputs the corpus starts from
};

/// Every target, in a fixed order.
const std::vector<target>& targets();
/// The one named `name`, or null.
const target* find_target(const std::string& name);

}  // namespace hart::fuzz
