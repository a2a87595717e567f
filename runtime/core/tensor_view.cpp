#include "runtime/core/tensor_view.h"

#include "runtime/core/check.h"

namespace hart {

tensor_view tensor_view::contiguous(void* data, dtype type, const int64_t* shape, int ndim) {
  HART_CHECK(ndim >= 0 && ndim <= max_dims) << "ndim " << ndim;
  tensor_view v;
  v.data = data;
  v.type = type;
  v.ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

tensor_view tensor_view::contiguous(void* data, dtype type, std::initializer_list<int64_t> shape) {
  return contiguous(data, type, shape.begin(), static_cast<int>(shape.size()));
}

int64_t tensor_view::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool tensor_view::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

std::string tensor_view::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace hart
