#include "runtime/weight_sync/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#include <nmmintrin.h>
#endif

namespace hart::weight_sync {
namespace {

constexpr uint32_t k_poly = 0x82F63B78u;  // reflected Castagnoli

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (k_poly & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}

uint32_t extend_portable(uint32_t c, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

// -- combining -----------------------------------------------------------------
//
// In the reflected representation bit 31 is x^0. crc(a ‖ b) = crc(a) · x^(8·|b|)
// ⊕ crc(b) (mod the polynomial): the conditioning cancels, since the register
// update is linear in its start value.

/// a · b mod the polynomial.
uint32_t mult_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m; m >>= 1) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    b = (b >> 1) ^ (k_poly & (0u - (b & 1u)));  // b · x
  }
  return product;
}

/// x^(2^k) mod the polynomial, k < 64.
const std::array<uint32_t, 64>& x_pow2() {
  static const std::array<uint32_t, 64> t = [] {
    std::array<uint32_t, 64> r{};
    r[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < r.size(); ++k) r[k] = mult_mod(r[k - 1], r[k - 1]);
    return r;
  }();
  return t;
}

/// x^(8·n_bytes) mod the polynomial: multiplying a register by it is the
/// effect of n_bytes zero bytes.
uint32_t zeros_shift(uint64_t n_bytes) {
  uint32_t shift = 1u << 31;  // x^0
  const std::array<uint32_t, 64>& t = x_pow2();
  for (size_t k = 3; n_bytes; n_bytes >>= 1, ++k) {  // bit j of n_bytes is x^(2^(j+3))
    if (n_bytes & 1) shift = mult_mod(t[k], shift);
  }
  return shift;
}

#if defined(__x86_64__)
// -- three interleaved chains -------------------------------------------------
//
// crc32q has a latency of 3 cycles and a throughput of 1 per cycle, so one
// chain runs at a third of the instruction's rate. A block of 3·L bytes is
// split into three runs that advance together; the register after the block
// is shift(shift(c0, L) ^ c1, L) ^ c2, where c1, c2 start from 0 and
// shift(c, L) is the (linear) effect of L zero bytes on the register, applied
// as four table lookups (Mark Adler's crc32c.c construction).

/// Tables applying `n_bytes` zero bytes to a register: zeros[k][b] is the
/// image of byte b in byte position k (the shift is linear in the register).
struct zeros_op {
  uint32_t t[4][256];

  explicit zeros_op(size_t n_bytes) {
    const uint32_t shift = zeros_shift(n_bytes);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = mult_mod(shift, b << (8 * k));
    }
  }

  uint32_t apply(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

// NOTE(weight_sync): 8 KiB runs (24 KiB blocks) keep the three streams within
// L1 reach of the prefetcher and make the combine (8 lookups) negligible; 256-byte
// runs pick up what is left of a long buffer. Measured in docs/perf-notes.md (W1 v2).
constexpr size_t k_long = 8192;
constexpr size_t k_short = 256;

// With Copy, every word read is also stored to `out` (staging a received
// frame): one pass over the source instead of a memcpy and a checksum pass.
// NOTE(weight_sync): non-temporal stores: the staging is read only when the
// update is built, so it need not displace the cache, and the stores skip
// reading the destination lines first. 512 MiB cold, same run: memcpy + CRC
// 3.7 GB/s, fused 4.0-4.4, fused + streaming stores 5.2-5.4 (docs/perf-notes.md W1 v2).
template <bool Copy>
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t c, const uint8_t* p, size_t n,
                                                        uint8_t* out) {
  static const zeros_op long_op(k_long), short_op(k_short);
  uint64_t c64 = c;
  for (const auto& [run, op] : {std::pair<size_t, const zeros_op*>{k_long, &long_op}, {k_short, &short_op}}) {
    while (n >= 3 * run) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < run; i += 8) {
        uint64_t v0, v1, v2;
        std::memcpy(&v0, p + i, 8);
        std::memcpy(&v1, p + run + i, 8);
        std::memcpy(&v2, p + 2 * run + i, 8);
        c64 = _mm_crc32_u64(c64, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
        if (Copy) {
          _mm_stream_si64(reinterpret_cast<long long*>(out + i), static_cast<long long>(v0));
          _mm_stream_si64(reinterpret_cast<long long*>(out + run + i), static_cast<long long>(v1));
          _mm_stream_si64(reinterpret_cast<long long*>(out + 2 * run + i), static_cast<long long>(v2));
        }
      }
      c64 = op->apply(uint32_t(c64)) ^ uint32_t(c1);
      c64 = op->apply(uint32_t(c64)) ^ uint32_t(c2);
      p += 3 * run;
      if (Copy) out += 3 * run;
      n -= 3 * run;
    }
  }
  if (Copy) {
    _mm_sfence();  // order the streamed stores before anything that reads the staging
    std::memcpy(out, p, n);
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = uint32_t(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
#endif

bool have_sse42() {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  return sse42;
#else
  return false;
#endif
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return mult_mod(zeros_shift(len_b), crc_a) ^ crc_b;
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (have_sse42()) return ~extend_sse42<false>(~crc, p, n, nullptr);
#endif
  return ~extend_portable(~crc, p, n);
}

uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
#if defined(__x86_64__)
  if (have_sse42()) return ~extend_sse42<true>(~crc, p, n, static_cast<uint8_t*>(dst));
#endif
  if (n) std::memcpy(dst, src, n);
  return ~extend_portable(~crc, p, n);
}

}  // namespace hart::weight_sync
