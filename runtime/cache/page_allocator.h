// File: runtime/cache/page_allocator.h
// A pool of fixed-size pages with reference counts and an ordered free list.
// ShadowRadix owns two of them: the full-slot pool (carries the CSA/HCA/
// indexer shadows) and the SWA pool (window KV + compressor-state rings).
//
//   page_allocator a(16);
//   page_id p = a.alloc();                 // refcount 1, taken from the front
//   a.ref(p);                              // a second holder (e.g. the tree)
//   a.unref(p, page_release::transient);   // back to 1
//   a.unref(p, page_release::cached);      // free again, queued at the back
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/core/status.h"

#include <cstdint>
#include <deque>
#include <vector>

namespace hart::cache {

/// How a page that drops to zero holders goes back to the free list.
/// NOTE(hart): vLLM PR #43447 — pages whose bytes were cached content go to
/// the back and transient pages (a request's private tail, out-of-window SWA)
/// to the front, so churn reuses transient pages first and the bytes of the
/// most recently cached content survive the longest.
enum class page_release { transient, cached };

class page_allocator {
 public:
  explicit page_allocator(int64_t n_pages);

  int64_t capacity() const { return static_cast<int64_t>(ref_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_used() const { return capacity() - n_free(); }

  /// Takes the page at the front of the free list with refcount 1, or
  /// no_page when the pool is empty.
  page_id alloc();
  /// One more holder of a used page.
  void ref(page_id p);
  /// One holder less; returns true when the page became free.
  bool unref(page_id p, page_release how);
  int32_t refcount(page_id p) const;
  /// Free pages in the order alloc() hands them out.
  const std::deque<page_id>& free_list() const { return free_; }

  /// Free list holds each zero-refcount page exactly once and nothing else.
  status check(const char* pool_name) const;

 private:
  std::vector<int32_t> ref_;  // [capacity] holders per page
  std::deque<page_id> free_;
};

}  // namespace hart::cache
