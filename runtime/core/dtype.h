// File: runtime/core/dtype.h
// Element types hart stores or reads. e2m1x2 is two FP4 (e2m1) values packed in
// one byte, the low nibble holding the even index (MXFP4 checkpoint layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hart {

enum class dtype : uint8_t {
  f64,
  f32,
  f16,
  bf16,
  e4m3,  // float8_e4m3fn: no inf, NaN = 0x7f/0xff, max 448
  e5m2,
  e8m0,    // unsigned power-of-two scale 2^(e-127), 0xff = NaN
  e2m1x2,  // packed FP4 pair
  i8,
  u8,
  i16,
  i32,
  i64,
  boolean,
};

/// Bytes per stored element (per packed pair for e2m1x2).
size_t dtype_size(dtype t);
std::string_view dtype_name(dtype t);
/// Safetensors spelling ("F32", "BF16", "F8_E4M3", "F8_E8M0", "I64", ...).
bool dtype_from_safetensors(std::string_view name, dtype* out);

enum class device_kind : uint8_t { cpu, cuda };

}  // namespace hart
