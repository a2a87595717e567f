// File: tests/serve/perturbed_checkpoint.h — a checkpoint a weight update can
// carry and a fresh load can be compared with: `model_dir`'s weights with every
// F32 tensor but the norms scaled by `scale`, stored as BF16 (what a trainer
// sends), next to a copy of its config and tokenizer, in a temp dir named by
// `tag` and the pid. Shared by the weight-sync serve suites.
#pragma once

#include "runtime/core/codecs.h"
#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace hart::testing {

inline std::string write_perturbed_checkpoint(const std::string& model_dir, float scale,
                                              const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hart_" + tag + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(model_dir) / f, dir / f, fs::copy_options::overwrite_existing);
  }
  auto store = weight_store::open(model_dir);
  EXPECT_TRUE(store.ok());
  std::vector<std::vector<uint8_t>> keep;
  std::vector<tensor_to_write> out;
  for (const std::string& n : store->names()) {
    const tensor_entry* e = store->find(n);
    if (e->type != dtype::f32) {
      out.push_back({n, e->type, e->shape, e->data, e->n_bytes});
      continue;
    }
    std::vector<float> f(e->numel());
    std::memcpy(f.data(), e->data, e->n_bytes);
    for (float& x : f) x *= n.find("norm") == std::string::npos ? scale : 1.0f;
    keep.emplace_back(f.size() * 2);
    f32_to_bf16(f.data(), reinterpret_cast<uint16_t*>(keep.back().data()), int64_t(f.size()));
    out.push_back({n, dtype::bf16, e->shape, keep.back().data(), keep.back().size()});
  }
  EXPECT_TRUE(safetensors_write((dir / "model.safetensors").string(), out).ok());
  return dir.string();
}

}  // namespace hart::testing
