// File: runtime/core/piece_pool.h — a few threads that split one large
// memory-bound job (a checksum, a copy out of pinned memory) into pieces:
// run(k, fn) calls fn(i) for every i < k, thread j of T (the caller is 0)
// taking pieces j, j + T, ..., and returns when every piece is done. One run
// at a time per pool.
//
//   piece_pool pool(4);                                     // the caller + 3 workers
//   pool.run(4, [&](size_t i) { std::memcpy(dst + i * q, src + i * q, q); });
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hart {

/// Threads for a pool when none are asked for: a quarter of the cores, 1 to 4
/// (a server's I/O and actor threads keep theirs).
int piece_pool_default_threads();

class piece_pool {
 public:
  /// `threads` in all, the caller's included; <= 1 runs everything on the caller.
  explicit piece_pool(int threads);
  ~piece_pool();
  piece_pool(const piece_pool&) = delete;
  piece_pool& operator=(const piece_pool&) = delete;

  /// fn(i) for i in [0, k); the caller takes pieces 0, threads(), 2·threads(), ...
  void run(size_t k, const std::function<void(size_t)>& fn);
  int threads() const { return int(n_threads_); }

 private:
  void work(size_t index);

  const size_t n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t k_ = 0;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
};

}  // namespace hart
