#include "kernels/quant/quant_args.h"

namespace hart::quant_args {

using ll = long long;

status check_blocks(const char* op, int64_t n, int64_t block) {
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  if (n < 0) return invalid_argument("%s: n=%lld must be >= 0", op, ll(n));
  if (n % block != 0)
    return invalid_argument("%s: n=%lld is not a multiple of block=%lld", op, ll(n), ll(block));
  return {};
}

status check_ptr(const char* op, const char* field, const void* p, int64_t n) {
  if (n > 0 && p == nullptr) return invalid_argument("%s: %s is null", op, field);
  return {};
}

status check_matrix(const char* op, int64_t rows, int64_t cols) {
  if (rows < 0) return invalid_argument("%s: rows=%lld must be >= 0", op, ll(rows));
  if (cols < 0) return invalid_argument("%s: cols=%lld must be >= 0", op, ll(cols));
  return {};
}

}  // namespace hart::quant_args
