#include "runtime/weight_sync/crc_pool.h"

#include <algorithm>

#include "runtime/weight_sync/crc32c.h"

namespace hart::weight_sync {
namespace {

// Below this a piece's thread hand-off (~10 µs) is no longer small against its
// CRC (~100 µs per MiB at 10 GB/s); pieces start on 4 KiB boundaries.
constexpr size_t k_min_piece = size_t(1) << 20;
constexpr size_t k_piece_align = 4096;

uint32_t piece_crc(uint8_t* dst, const uint8_t* src, size_t n) {
  return dst ? crc32c_copy(0, dst, src, n) : crc32c_extend(0, src, n);
}

}  // namespace

int crc_pool_default_threads() {
  const int cores = int(std::thread::hardware_concurrency());
  return std::clamp(cores / 4, 1, 4);
}

crc_pool::crc_pool(int threads) {
  const int n = std::max(threads, 1);
  pieces_.resize(size_t(n));
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { work(size_t(i)); });
}

crc_pool::~crc_pool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void crc_pool::work(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    piece p;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      p = pieces_[index];
    }
    if (p.n) p.crc = piece_crc(p.dst, p.src, p.n);
    std::lock_guard<std::mutex> lk(mu_);
    pieces_[index].crc = p.crc;
    if (--pending_ == 0) done_.notify_one();
  }
}

uint32_t crc_pool::run(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) {
  const size_t k = std::min(pieces_.size(), n / k_min_piece);
  if (k <= 1) return dst ? crc32c_copy(crc, dst, src, n) : crc32c_extend(crc, src, n);
  // k pieces of ~n/k bytes, 4 KiB-aligned cuts; workers 1..k-1 take theirs, the caller piece 0.
  const size_t step = (n / k + k_piece_align - 1) / k_piece_align * k_piece_align;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const size_t at = std::min(n, i * step), len = i < k ? std::min(step, n - at) : 0;
      pieces_[i] = {dst ? dst + at : nullptr, src + at, i + 1 == k ? n - at : len, 0};
    }
    pending_ = workers_.size();
    ++generation_;
  }
  start_.notify_all();
  const uint32_t first = piece_crc(pieces_[0].dst, pieces_[0].src, pieces_[0].n);
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return pending_ == 0; });
  uint32_t c = crc32c_combine(crc, first, pieces_[0].n);
  for (size_t i = 1; i < k; ++i) c = crc32c_combine(c, pieces_[i].crc, pieces_[i].n);
  return c;
}

uint32_t crc_pool::copy(uint32_t crc, void* dst, const void* src, size_t n) {
  return run(crc, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
}

uint32_t crc_pool::extend(uint32_t crc, const void* src, size_t n) {
  return run(crc, nullptr, static_cast<const uint8_t*>(src), n);
}

}  // namespace hart::weight_sync
