// File: runtime/model/safetensors.h
// Read-only, mmap-backed safetensors checkpoints: one file, or a directory with
// `model.safetensors` or a sharded `model.safetensors.index.json`. Every header
// is validated on open (sizes, offsets, dtypes, shape × dtype = byte span), so
// a truncated or corrupt file is a clear status, never a crash. A small writer
// produces files other tools (PyTorch, HF) read.
//
//   HART_ASSIGN_OR_RETURN(auto store, weight_store::open("/models/tiny-a"));
//   const tensor_entry* e = store.find("model.embed_tokens.weight");
#pragma once

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hart {

/// One tensor inside a mapped file. `data` stays valid while the owning
/// safetensors_file (or weight_store) lives.
struct tensor_entry {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  std::string file;  // path of the file holding it, for error messages

  int64_t numel() const;
  /// "[512, 128]"
  std::string shape_string() const;
};

class safetensors_file {
 public:
  /// Maps `path` and validates its header.
  static status_or<std::unique_ptr<safetensors_file>> open(const std::string& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const tensor_entry* find(std::string_view name) const;
  const std::vector<tensor_entry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  safetensors_file() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<tensor_entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// All tensors of a checkpoint, across shards.
class weight_store {
 public:
  /// `path` is a directory (model.safetensors.index.json preferred, else
  /// model.safetensors, else the single *.safetensors file) or one file.
  static status_or<weight_store> open(const std::string& path);

  const tensor_entry* find(std::string_view name) const;
  /// Names in sorted order.
  std::vector<std::string> names() const;
  size_t size() const { return index_.size(); }

 private:
  std::vector<std::shared_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_entry*, std::less<>> index_;
};

/// A tensor to write: raw little-endian bytes of `type` in row-major order.
struct tensor_to_write {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t n_bytes = 0;
};

/// Writes a safetensors file (header padded to 8 bytes, tensors in the given order).
status safetensors_write(const std::string& path, const std::vector<tensor_to_write>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace hart
