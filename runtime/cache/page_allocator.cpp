#include "runtime/cache/page_allocator.h"

#include "runtime/core/check.h"

namespace hart::cache {

page_allocator::page_allocator(int64_t n_pages) : ref_(static_cast<size_t>(n_pages), 0) {
  for (int64_t p = 0; p < n_pages; ++p) free_.push_back(static_cast<page_id>(p));
}

page_id page_allocator::alloc() {
  if (free_.empty()) return no_page;
  const page_id p = free_.front();
  free_.pop_front();
  HART_CHECK(ref_[p] == 0) << "page " << p << " on the free list has refcount " << ref_[p];
  ref_[p] = 1;
  return p;
}

void page_allocator::ref(page_id p) {
  HART_CHECK(p >= 0 && p < capacity()) << "page " << p;
  HART_CHECK(ref_[p] > 0) << "ref of free page " << p;
  ++ref_[p];
}

bool page_allocator::unref(page_id p, page_release how) {
  HART_CHECK(p >= 0 && p < capacity()) << "page " << p;
  HART_CHECK(ref_[p] > 0) << "unref of free page " << p;
  if (--ref_[p] > 0) return false;
  if (how == page_release::cached) {
    free_.push_back(p);
  } else {
    free_.push_front(p);
  }
  return true;
}

int32_t page_allocator::refcount(page_id p) const {
  HART_CHECK(p >= 0 && p < capacity()) << "page " << p;
  return ref_[p];
}

status page_allocator::check(const char* pool_name) const {
  std::vector<char> seen(ref_.size(), 0);
  for (page_id p : free_) {
    if (p < 0 || p >= capacity()) return internal_error("%s: free list holds bad page %d", pool_name, p);
    if (seen[p]) return internal_error("%s: page %d twice on the free list", pool_name, p);
    if (ref_[p] != 0) return internal_error("%s: free page %d has refcount %d", pool_name, p, ref_[p]);
    seen[p] = 1;
  }
  int64_t n_zero = 0;
  for (int32_t r : ref_) {
    if (r < 0) return internal_error("%s: negative refcount", pool_name);
    n_zero += r == 0;
  }
  if (n_zero != n_free()) {
    return internal_error("%s: %lld pages have refcount 0 but %lld are on the free list", pool_name,
                          static_cast<long long>(n_zero), static_cast<long long>(n_free()));
  }
  return status::ok_status();
}

}  // namespace hart::cache
