#include "runtime/core/malloc_tuning.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <climits>

#include <atomic>

namespace hart {
namespace {

std::atomic<size_t> kept_bytes{0};  // malloc_keep_freed_memory's, for malloc_return_freed_memory

}  // namespace

status malloc_keep_freed_memory(size_t keep_bytes) {
#if defined(__GLIBC__)
  const int keep = int(keep_bytes > size_t(INT_MAX) ? size_t(INT_MAX) : keep_bytes);
  // Blocks up to 32 MB (glibc's cap) come from the arena, never a fresh mapping;
  // the arena returns freed memory to the kernel only past `keep` bytes.
  if (mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 ||
      mallopt(M_TRIM_THRESHOLD, keep) != 1) {
    return internal_error("mallopt refused the weight-sync allocator settings");
  }
  kept_bytes.store(size_t(keep), std::memory_order_relaxed);
  return {};
#else
  (void)keep_bytes;
  return unimplemented("malloc_keep_freed_memory: not glibc");
#endif
}

bool malloc_return_freed_memory() {
#if defined(__GLIBC__)
  return malloc_trim(kept_bytes.load(std::memory_order_relaxed)) == 1;
#else
  return false;
#endif
}

}  // namespace hart
