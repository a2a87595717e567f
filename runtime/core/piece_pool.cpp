#include "runtime/core/piece_pool.h"

#include <algorithm>

namespace hart {

int piece_pool_default_threads() {
  const int cores = int(std::thread::hardware_concurrency());
  return std::clamp(cores / 4, 1, 4);
}

piece_pool::piece_pool(int threads) : n_threads_(size_t(std::max(threads, 1))) {
  for (size_t i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { work(i); });
}

piece_pool::~piece_pool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void piece_pool::work(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* fn = nullptr;
    size_t k = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      k = k_;
    }
    for (size_t i = index; i < k; i += n_threads_) (*fn)(i);
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) done_.notify_one();
  }
}

void piece_pool::run(size_t k, const std::function<void(size_t)>& fn) {
  const size_t n = n_threads_;
  if (k <= 1 || n == 1) {
    for (size_t i = 0; i < k; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    k_ = k;
    pending_ = n - 1;  // every worker reports, with a piece or without
    ++generation_;
  }
  start_.notify_all();
  for (size_t i = 0; i < k; i += n) fn(i);
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return pending_ == 0; });
}

}  // namespace hart
