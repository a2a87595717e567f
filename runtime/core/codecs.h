// File: runtime/core/codecs.h
// Scalar codecs between fp32 and the storage formats hart reads or simulates:
// bf16, IEEE f16 (decode only), float8_e4m3fn, e8m0 scales and e2m1 (FP4).
// Every encoder rounds to nearest, ties to even, computed with integer
// arithmetic (independent of the FPU rounding mode). Decoders are exact.
//
//   uint8_t q = e4m3_from_f32(x / s);   // saturates at +-448
//   float y = f32_from_e4m3(q) * s;
#pragma once

#include <cstdint>

namespace hart {

// -- bf16 -------------------------------------------------------------------

/// fp32 -> bf16, RNE. Overflow rounds to +-inf (IEEE); NaN stays NaN with its
/// sign and top payload bits, quiet bit forced (0x7f81 payload -> 0x7fc1).
uint16_t bf16_from_f32(float x);
/// bf16 -> fp32, exact.
float f32_from_bf16(uint16_t b);
/// x rounded to the nearest bf16 value, returned as fp32.
float round_to_bf16(float x);

// -- f16 (IEEE binary16) ----------------------------------------------------

/// f16 -> fp32, exact for finite values and infinities; a NaN keeps its sign
/// and payload and comes back quiet.
float f32_from_f16(uint16_t h);

// -- float8_e4m3fn: bias 7, no inf, NaN = 0x7f/0xff, max 448, min 2^-9 -------

/// fp32 -> e4m3, RNE. Finite inputs beyond +-448 and +-inf saturate to +-448
/// (0x7e/0xfe): the reference clamps to +-448 before every cast, so the two
/// agree; torch's unclamped cast would give NaN instead. NaN -> 0x7f.
/// Negative values that round to zero give -0 (0x80).
uint8_t e4m3_from_f32(float x);
/// e4m3 -> fp32, exact; 0x7f/0xff -> NaN.
float f32_from_e4m3(uint8_t q);

// -- e8m0: unsigned power-of-two scale -------------------------------------

/// 2^(e-127); 0xff -> NaN. e = 0 gives 2^-127 (an fp32 subnormal, exact).
float f32_from_e8m0(uint8_t e);
/// Code of 2^e, e clamped to [-127, 127] (never returns the NaN code 0xff).
uint8_t e8m0_from_exponent(int e);

// -- e2m1 (FP4): {0, .5, 1, 1.5, 2, 3, 4, 6}, sign in bit 3 -----------------

/// fp32 -> e2m1 nibble (bits 0..3), RNE, saturating at +-6 (inf included).
/// NOTE(codecs): e2m1 has no NaN; NaN -> +6 (0x7), the "positive MAX_NORM"
/// rule PTX's cvt.satfinite applies to FP4/FP6 targets.
uint8_t e2m1_from_f32(float x);
/// e2m1 nibble -> fp32, exact. Bits above bit 3 are ignored.
float f32_from_e2m1(uint8_t nibble);

// -- bulk helpers (weight loading); src and dst must not overlap ------------

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void e4m3_to_f32(const uint8_t* src, float* dst, int64_t n);

}  // namespace hart
