#include "runtime/weight_sync/staged_source.h"

#include <sys/mman.h>

#include <cstdlib>

namespace hart::weight_sync {
namespace {

constexpr size_t k_huge_page_bytes = size_t(2) << 20;
#ifdef MADV_POPULATE_WRITE
constexpr int k_madv_populate_write = MADV_POPULATE_WRITE;
#else
constexpr int k_madv_populate_write = 23;  // Linux 5.14 uapi value; older kernels answer EINVAL
#endif

}  // namespace

status_or<std::shared_ptr<staged_buffer>> staged_buffer::create(size_t n_bytes) {
  const bool huge = n_bytes >= k_huge_page_bytes;
  const size_t align = huge ? k_huge_page_bytes : 64;
  const size_t rounded = (n_bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded);
  if (!p) return resource_exhausted("no memory to stage %zu bytes", n_bytes);
  // NOTE(weight_sync): THP is `madvise` mode on the boxes measured, and a fresh
  // buffer filled by memcpy page fault by page fault ran at 0.5-1.3 GB/s;
  // populating it in one call first (huge pages, Linux >= 5.14) made fill +
  // copy 2.0-2.3 GB/s in the same run (docs/perf-notes.md W1 v2). Failure only costs speed.
  if (huge) {
    (void)::madvise(p, rounded, MADV_HUGEPAGE);
    (void)::madvise(p, rounded, k_madv_populate_write);
  }
  return std::shared_ptr<staged_buffer>(new staged_buffer(static_cast<uint8_t*>(p), n_bytes));
}

staged_buffer::~staged_buffer() {
  std::free(data_);
}

void staged_tensor_source::add(tensor_entry e, std::shared_ptr<const staged_buffer> keep) {
  auto h = std::make_unique<held>();
  h->entry = std::move(e);
  h->keep = std::move(keep);
  entries_.push_back(std::move(h));
}

std::vector<const tensor_entry*> staged_tensor_source::tensors() const {
  std::vector<const tensor_entry*> out;
  out.reserve(entries_.size());
  for (const auto& h : entries_) out.push_back(&h->entry);
  return out;
}

}  // namespace hart::weight_sync
