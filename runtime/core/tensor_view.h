// File: runtime/core/tensor_view.h
// A non-owning view: pointer, dtype, device, shape and strides in elements
// (outermost dimension first, like safetensors and PyTorch). Offsets are int64.
#pragma once

#include "runtime/core/dtype.h"

#include <cstdint>
#include <initializer_list>
#include <string>

namespace hart {

struct tensor_view {
  static constexpr int max_dims = 8;

  void* data = nullptr;
  dtype type = dtype::f32;
  device_kind device = device_kind::cpu;
  int ndim = 0;
  int64_t shape[max_dims] = {};
  int64_t strides[max_dims] = {};  // elements

  /// A contiguous (row-major) view of `shape`.
  static tensor_view contiguous(void* data, dtype type, std::initializer_list<int64_t> shape);
  static tensor_view contiguous(void* data, dtype type, const int64_t* shape, int ndim);

  int64_t numel() const;
  bool is_contiguous() const;
  /// "[2, 3, 4]"
  std::string shape_string() const;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace hart
