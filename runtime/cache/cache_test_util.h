// File: runtime/cache/cache_test_util.h
// Test-only: an engine stand-in for shadow_radix tests. It "computes" KV by
// writing, per position, a hash of the request's whole prefix into a side
// table page -> slot contents (for the full and the SWA pool), and verifies
// that every position a request may read holds its own prefix's content —
// i.e. that no prefix hit, eviction or page reuse ever exposes wrong data.
#pragma once

#include "runtime/cache/shadow_radix.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace hart::cache::testing {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class engine_sim {
 public:
  explicit engine_sim(shadow_radix& c)
      : c_(c),
        page_size_(c.config().page_size),
        full_(static_cast<size_t>(c.config().n_full_pages * c.config().page_size), 0),
        swa_(static_cast<size_t>(c.config().n_swa_pages * c.config().page_size), 0) {}

  shadow_radix& cache() { return c_; }

  /// Admits `seq` (the prompt; more tokens may be appended later).
  status_or<request_id> admit(const std::vector<int32_t>& seq) {
    auto r = c_.admit(seq);
    if (r.ok()) seqs_[*r] = seq;
    return r;
  }
  std::vector<int32_t>& seq(request_id r) { return seqs_.at(r); }
  const std::map<request_id, std::vector<int32_t>>& live() const { return seqs_; }

  /// Reserves, writes positions [n_computed, n) and advances to n.
  status compute(request_id r, int64_t n) {
    HART_RETURN_IF_ERROR(c_.reserve(r, n));
    const request_pages& pg = c_.pages(r);
    const std::vector<int32_t>& s = seqs_.at(r);
    const std::vector<uint64_t>& h = hashes(r, n);
    for (int64_t p = pg.n_computed; p < n; ++p) {
      full_[slot(pg.full[p / page_size_], p)] = h[p];
      if (pg.swa[p / page_size_] != no_page) swa_[slot(pg.swa[p / page_size_], p)] = h[p];
    }
    return c_.advance(r, std::vector<int32_t>(s.begin(), s.begin() + n));
  }

  status finish(request_id r) {
    const int64_t n = c_.pages(r).n_computed;
    const std::vector<int32_t> s = seqs_.at(r);
    seqs_.erase(r);
    hashes_.erase(r);
    return c_.finish(r, std::vector<int32_t>(s.begin(), s.begin() + n));
  }
  status abort(request_id r) {
    seqs_.erase(r);
    hashes_.erase(r);
    return c_.abort(r);
  }

  /// Every readable position of r (< n_computed, and in the window for SWA)
  /// holds r's own prefix content: the first and last readable slot of each
  /// page are compared (a reused page is rewritten from slot 0 up).
  void verify(request_id r) {
    const request_pages& pg = c_.pages(r);
    const int64_t n = pg.n_computed;
    const std::vector<uint64_t>& h = hashes(r, n);
    const int64_t w_begin = std::max<int64_t>(0, n - c_.config().window);
    for (int64_t j = 0; j * page_size_ < n; ++j) {
      const int64_t a = j * page_size_, b = std::min(n, a + page_size_);
      for (int64_t p : {a, b - 1}) {
        ASSERT_EQ(full_[slot(pg.full[j], p)], h[p])
            << "request " << r << " reads wrong full content at position " << p;
      }
      if (b <= w_begin) continue;
      ASSERT_NE(pg.swa[j], no_page) << "request " << r << " lost SWA page " << j;
      for (int64_t p : {std::max(a, w_begin), b - 1}) {
        ASSERT_EQ(swa_[slot(pg.swa[j], p)], h[p])
            << "request " << r << " reads wrong SWA content at position " << p;
      }
    }
  }
  void verify_all() {
    for (const auto& kv : seqs_) verify(kv.first);
  }

 private:
  size_t slot(page_id page, int64_t pos) const {
    return static_cast<size_t>(page * page_size_ + pos % page_size_);
  }
  /// Content of position p = hash of the request's tokens [0, p].
  const std::vector<uint64_t>& hashes(request_id r, int64_t n) {
    std::vector<uint64_t>& h = hashes_[r];
    const std::vector<int32_t>& s = seqs_.at(r);
    uint64_t acc = h.empty() ? 0 : h.back();
    for (int64_t p = static_cast<int64_t>(h.size()); p < n; ++p) {
      h.push_back(acc = mix64(acc ^ static_cast<uint64_t>(s[p])));
    }
    return h;
  }

  shadow_radix& c_;
  int64_t page_size_;
  std::vector<uint64_t> full_;  // [n_full_pages * P] content per full slot
  std::vector<uint64_t> swa_;   // [n_swa_pages * P] content per SWA slot
  std::map<request_id, std::vector<int32_t>> seqs_;
  std::map<request_id, std::vector<uint64_t>> hashes_;  // grows with seqs_ (append-only)
};

}  // namespace hart::cache::testing
