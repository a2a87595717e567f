// File: runtime/model/random_checkpoint_testing.h — for tests: a random
// checkpoint (random_checkpoint.h) in a temporary directory that goes with
// the object. The weight-push tests write a trainer's bf16 checkpoint and its
// release conversion as the bf16 and release formats of one seed with
// bf16_values.
//
//   const temp_random_checkpoint release(data + "/official-fp8/csa/config.json", checkpoint_format::release,
//   2); auto eng = load(release.dir);
#pragma once

#include "runtime/model/random_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace hart {

struct temp_random_checkpoint {
  std::string dir;

  /// `config_path` (a config.json) written in `format` from `seed`, every weight a bf16 value.
  temp_random_checkpoint(const std::string& config_path, checkpoint_format format, uint64_t seed) {
    static std::atomic<int> counter{0};
    dir = (std::filesystem::temp_directory_path() /
           ("hart-random-checkpoint-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
              .string();
    std::ifstream in(config_path);
    random_checkpoint_options o;
    o.seed = seed;
    o.format = format;
    o.bf16_values = true;
    const status s = random_checkpoint_write(dir, nlohmann::json::parse(in), o);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~temp_random_checkpoint() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  temp_random_checkpoint(const temp_random_checkpoint&) = delete;
  temp_random_checkpoint& operator=(const temp_random_checkpoint&) = delete;
};

}  // namespace hart
