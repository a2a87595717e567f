// File: runtime/core/malloc_tuning.h — process-wide malloc settings for a
// server that receives weight updates (W1), and giving freed memory back.
//
// ZeroMQ allocates every received frame (4 MB) in its I/O thread. glibc gives
// that thread its own arena, whose 64 MB heaps are unmapped as soon as they
// empty and mapped afresh for the next frames, so every frame's receive faulted
// in and zeroed 1024 new pages: ~40% of the I/O thread's time (perf, 2-core
// box). One arena (the main one) that keeps up to `keep_bytes` of freed memory
// mapped removes the faults after the first update.
#pragma once

#include "runtime/core/status.h"

#include <cstddef>

namespace hart {

/// Call before the process starts its threads (arenas are chosen per thread on
/// its first allocation). Unimplemented off glibc; the process runs as before.
status malloc_keep_freed_memory(size_t keep_bytes);

/// Gives the kernel back the free memory every arena holds (malloc_trim), keeping
/// what malloc_keep_freed_memory asked for. A server calls it after many
/// connections closed: ZeroMQ's I/O threads allocate each connection's pipes in
/// arenas of their own, whose freed pages glibc otherwise keeps (1,500 closed
/// connections left ~110 MB resident, round after round). Takes time in
/// proportion to the arenas' size (milliseconds): not on a hot path. Returns
/// whether memory was released; false off glibc.
bool malloc_return_freed_memory();

}  // namespace hart
