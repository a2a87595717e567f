#include "runtime/core/dtype.h"

namespace hart {

size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f16:
    case dtype::bf16:
    case dtype::i16:
      return 2;
    case dtype::e4m3:
    case dtype::e5m2:
    case dtype::e8m0:
    case dtype::e2m1x2:
    case dtype::i8:
    case dtype::u8:
    case dtype::boolean:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f64:
      return "F64";
    case dtype::f32:
      return "F32";
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
    case dtype::e4m3:
      return "F8_E4M3";
    case dtype::e5m2:
      return "F8_E5M2";
    case dtype::e8m0:
      return "F8_E8M0";
    case dtype::e2m1x2:
      return "F4_E2M1x2";
    case dtype::i8:
      return "I8";
    case dtype::u8:
      return "U8";
    case dtype::i16:
      return "I16";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
    case dtype::boolean:
      return "BOOL";
  }
  return "?";
}

bool dtype_from_safetensors(std::string_view n, dtype* out) {
  static constexpr struct {
    std::string_view name;
    dtype t;
  } table[] = {
      {"F64", dtype::f64},      {"F32", dtype::f32},          {"F16", dtype::f16},
      {"BF16", dtype::bf16},    {"F8_E4M3", dtype::e4m3},     {"F8_E5M2", dtype::e5m2},
      {"F8_E8M0", dtype::e8m0}, {"F4_E2M1x2", dtype::e2m1x2}, {"I8", dtype::i8},
      {"U8", dtype::u8},        {"I16", dtype::i16},          {"I32", dtype::i32},
      {"I64", dtype::i64},      {"BOOL", dtype::boolean},
  };
  for (const auto& e : table) {
    if (e.name == n) {
      *out = e.t;
      return true;
    }
  }
  return false;
}

}  // namespace hart
