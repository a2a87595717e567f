#include "runtime/core/tensor_view.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hart {
namespace {

TEST(tensor_view, contiguous_strides_and_numel) {
  std::vector<float> buf(24);
  tensor_view v = tensor_view::contiguous(buf.data(), dtype::f32, {2, 3, 4});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.data, buf.data());
  EXPECT_EQ(v.type, dtype::f32);
  EXPECT_EQ(v.device, device_kind::cpu);
  EXPECT_EQ(v.shape[0], 2);
  EXPECT_EQ(v.shape[2], 4);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(v.as<float>(), buf.data());
  v.as<float>()[5] = 7.0f;
  EXPECT_EQ(buf[5], 7.0f);
}

TEST(tensor_view, scalar_and_empty) {
  tensor_view s = tensor_view::contiguous(nullptr, dtype::bf16, {});
  EXPECT_EQ(s.ndim, 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.shape_string(), "[]");

  tensor_view e = tensor_view::contiguous(nullptr, dtype::f32, {4, 0});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.shape_string(), "[4, 0]");
}

TEST(tensor_view, non_contiguous_views) {
  // A transpose of a [3, 4] buffer: shape [4, 3], strides [1, 4].
  tensor_view t = tensor_view::contiguous(nullptr, dtype::f32, {3, 4});
  std::swap(t.shape[0], t.shape[1]);
  std::swap(t.strides[0], t.strides[1]);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 12);

  // A row slice with padding: shape [2, 3], row stride 5.
  tensor_view p = tensor_view::contiguous(nullptr, dtype::f32, {2, 3});
  p.strides[0] = 5;
  EXPECT_FALSE(p.is_contiguous());

  // Size-1 dimensions may carry any stride.
  tensor_view one = tensor_view::contiguous(nullptr, dtype::f32, {1, 3});
  one.strides[0] = 12345;
  EXPECT_TRUE(one.is_contiguous());
}

TEST(tensor_view, int64_extents) {
  // Strides beyond 2^31 elements (R9): never computed in 32 bits.
  tensor_view v = tensor_view::contiguous(nullptr, dtype::e4m3, {3, 65536, 65536});
  EXPECT_EQ(v.strides[0], int64_t{1} << 32);
  EXPECT_EQ(v.numel(), int64_t{3} << 32);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.shape_string(), "[3, 65536, 65536]");
}

TEST(tensor_view, pointer_shape_overload_and_max_dims) {
  const int64_t shape[tensor_view::max_dims] = {1, 2, 1, 2, 1, 2, 1, 2};
  tensor_view v = tensor_view::contiguous(nullptr, dtype::i32, shape, tensor_view::max_dims);
  EXPECT_EQ(v.ndim, 8);
  EXPECT_EQ(v.numel(), 16);
  EXPECT_EQ(v.strides[7], 1);
  EXPECT_EQ(v.strides[0], 16);
}

TEST(tensor_view_death_test, too_many_dims_aborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_DEATH(tensor_view::contiguous(nullptr, dtype::f32, shape, 9), "ndim 9");
}

TEST(dtype, sizes_and_safetensors_names) {
  EXPECT_EQ(dtype_size(dtype::f32), 4u);
  EXPECT_EQ(dtype_size(dtype::bf16), 2u);
  EXPECT_EQ(dtype_size(dtype::e4m3), 1u);
  EXPECT_EQ(dtype_size(dtype::e8m0), 1u);
  EXPECT_EQ(dtype_size(dtype::e2m1x2), 1u);
  EXPECT_EQ(dtype_size(dtype::i64), 8u);
  for (dtype t : {dtype::f32, dtype::bf16, dtype::e4m3, dtype::e8m0, dtype::i64, dtype::i8}) {
    dtype back = dtype::boolean;
    ASSERT_TRUE(dtype_from_safetensors(dtype_name(t), &back)) << dtype_name(t);
    EXPECT_EQ(back, t);
  }
  dtype out = dtype::f32;
  EXPECT_FALSE(dtype_from_safetensors("F7", &out));
  EXPECT_EQ(out, dtype::f32);
}

}  // namespace
}  // namespace hart
