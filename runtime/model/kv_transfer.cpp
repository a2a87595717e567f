#include "runtime/model/kv_transfer.h"

#include <algorithm>
#include <cstring>

namespace hart {
namespace {

// The header of a transfer of positions [0, n_tokens) from `store`, every page in range.
status_or<kv_pages> transfer_header(const kv_store& store, const model_config& cfg, int64_t n_tokens,
                                    int64_t skip_full, int64_t first_swa) {
  if (n_tokens <= 0)
    return invalid_argument("kv export: %lld positions (need at least one)", (long long)n_tokens);
  kv_pages kv;
  kv.n_tokens = n_tokens;
  kv.layout = store.layout_id();
  kv.page_size = store.page_size();
  const int64_t n_pages = kv.n_pages();
  if (skip_full < 0 || skip_full >= n_pages) {
    return invalid_argument("kv export: skipping %lld of the %lld full pages leaves none to send",
                            (long long)skip_full, (long long)n_pages);
  }
  kv.first_full = skip_full;
  kv.first_swa = std::max<int64_t>(0, n_tokens - swa_live_tokens(cfg)) / kv.page_size;
  if (first_swa >= 0) {
    if (first_swa > kv.first_swa) {
      return invalid_argument("kv export: SWA pages from %lld leave out live page %lld", (long long)first_swa,
                              (long long)kv.first_swa);
    }
    kv.first_swa = first_swa;
  }
  kv.first_page = 0;
  kv.end_page = n_pages;
  return kv;
}

// Page ids for every page `kv` carries: live in a store of n_full and n_swa pages.
status check_page_ids(const kv_pages& kv, const std::vector<int32_t>& full, const std::vector<int32_t>& swa,
                      int64_t n_full, int64_t n_swa, const char* what, const char* missing) {
  const int64_t n_pages = kv.n_pages();
  if (int64_t(full.size()) < n_pages || int64_t(swa.size()) < n_pages) {
    return invalid_argument("%s: %lld positions need %lld pages, the table has %zu full and %zu SWA", what,
                            (long long)kv.n_tokens, (long long)n_pages, full.size(), swa.size());
  }
  for (int64_t pg = kv.first_page; pg < kv.end_page; ++pg) {
    const bool full_ok = pg < kv.full_begin() || (full[pg] >= 0 && full[pg] < n_full);
    const bool swa_ok = pg < kv.swa_begin() || (swa[pg] >= 0 && swa[pg] < n_swa);
    if (!full_ok || !swa_ok) {
      return invalid_argument("%s: page %lld (positions from %lld) %s", what, (long long)pg,
                              (long long)(pg * kv.page_size), missing);
    }
  }
  return {};
}

}  // namespace

status_or<std::vector<kv_page_range>> kv_pages_plan(const kv_store& store, const model_config& cfg,
                                                    int64_t n_tokens, int64_t skip_full,
                                                    size_t max_chunk_bytes, int64_t first_swa) {
  HART_ASSIGN_OR_RETURN(const kv_pages whole, transfer_header(store, cfg, n_tokens, skip_full, first_swa));
  const size_t full_bytes = size_t(store.full_page_floats()) * sizeof(float);
  const size_t swa_bytes = size_t(store.swa_page_floats()) * sizeof(float);
  // The last page carries both, and is the largest.
  if (full_bytes + swa_bytes > max_chunk_bytes) {
    return invalid_argument("kv plan: a page holds %zu bytes of KV, over the %zu-byte chunk limit",
                            full_bytes + swa_bytes, max_chunk_bytes);
  }
  std::vector<kv_page_range> ranges;
  kv_page_range r{std::min(whole.first_full, whole.first_swa), 0};
  size_t r_bytes = 0;
  for (int64_t pg = r.first_page; pg < whole.end_page; ++pg) {
    const size_t page_bytes =
        (pg >= whole.first_full ? full_bytes : 0) + (pg >= whole.first_swa ? swa_bytes : 0);
    if (r_bytes + page_bytes > max_chunk_bytes) {
      r.end_page = pg;
      ranges.push_back(r);
      r = {pg, 0};
      r_bytes = 0;
    }
    r_bytes += page_bytes;
  }
  r.end_page = whole.end_page;
  ranges.push_back(r);
  return ranges;
}

status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full) {
  const int64_t n_pages = store.page_size() > 0 ? (n_tokens + store.page_size() - 1) / store.page_size() : 0;
  return kv_pages_export(store, cfg, pages, n_tokens, skip_full, {0, n_pages});
}

status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full, kv_page_range range,
                                    int64_t first_swa) {
  HART_ASSIGN_OR_RETURN(kv_pages kv, transfer_header(store, cfg, n_tokens, skip_full, first_swa));
  if (range.first_page < 0 || range.first_page >= range.end_page || range.end_page > kv.n_pages()) {
    return invalid_argument("kv export: pages [%lld, %lld) of a sequence of %lld pages",
                            (long long)range.first_page, (long long)range.end_page, (long long)kv.n_pages());
  }
  kv.first_page = range.first_page;
  kv.end_page = range.end_page;
  HART_RETURN_IF_ERROR(check_page_ids(kv, pages.full, pages.swa, store.n_full_pages(), store.n_swa_pages(),
                                      "kv export", "is not live in the store"));
  const int64_t F = store.full_page_floats(), S = store.swa_page_floats();
  kv.full.resize(size_t(kv.n_full_carried() * F));
  kv.swa.resize(size_t(kv.n_swa_carried() * S));
  for (int64_t pg = kv.full_begin(); pg < kv.end_page; ++pg) {
    std::memcpy(kv.full.data() + (pg - kv.full_begin()) * F, store.full_page(pages.full[pg]),
                size_t(F) * sizeof(float));
  }
  for (int64_t pg = kv.swa_begin(); pg < kv.end_page; ++pg) {
    std::memcpy(kv.swa.data() + (pg - kv.swa_begin()) * S, store.swa_page(pages.swa[pg]),
                size_t(S) * sizeof(float));
  }
  return kv;
}

status kv_pages_import(const kv_pages& kv, kv_store& store, const std::vector<int32_t>& full,
                       const std::vector<int32_t>& swa) {
  if (kv.layout != store.layout_id() || kv.page_size != store.page_size()) {
    return invalid_argument(
        "kv import: the pages were laid out for another model or page size (page size %lld, this store %lld)",
        (long long)kv.page_size, (long long)store.page_size());
  }
  const int64_t n_pages = kv.n_pages(), F = store.full_page_floats(), S = store.swa_page_floats();
  if (kv.n_tokens <= 0 || kv.first_full < 0 || kv.first_full >= n_pages || kv.first_swa < 0 ||
      kv.first_swa > n_pages || kv.first_page < 0 || kv.first_page >= kv.end_page || kv.end_page > n_pages ||
      int64_t(kv.full.size()) != kv.n_full_carried() * F ||
      int64_t(kv.swa.size()) != kv.n_swa_carried() * S) {
    return invalid_argument(
        "kv import: pages [%lld, %lld) of %lld positions in %zu + %zu floats do not match the layout (%lld "
        "pages)",
        (long long)kv.first_page, (long long)kv.end_page, (long long)kv.n_tokens, kv.full.size(),
        kv.swa.size(), (long long)n_pages);
  }
  HART_RETURN_IF_ERROR(check_page_ids(kv, full, swa, store.n_full_pages(), store.n_swa_pages(), "kv import",
                                      "has no page of this store"));
  for (int64_t pg = kv.full_begin(); pg < kv.end_page; ++pg) {
    std::memcpy(store.full_page(full[pg]), kv.full.data() + (pg - kv.full_begin()) * F,
                size_t(F) * sizeof(float));
  }
  for (int64_t pg = kv.swa_begin(); pg < kv.end_page; ++pg) {
    std::memcpy(store.swa_page(swa[pg]), kv.swa.data() + (pg - kv.swa_begin()) * S,
                size_t(S) * sizeof(float));
  }
  return {};
}

status kv_pages_drop_swa_below(kv_pages& kv, int64_t page) {
  if (page <= kv.first_swa) return {};
  const int64_t before = kv.n_swa_carried();
  if (before > 0 && kv.swa.size() % size_t(before) != 0) {
    return invalid_argument("kv drop: %zu SWA floats are not %lld whole pages", kv.swa.size(),
                            (long long)before);
  }
  const size_t page_floats = before > 0 ? kv.swa.size() / size_t(before) : 0;
  kv.first_swa = std::min(page, kv.n_pages());
  const int64_t after = kv.n_swa_carried();
  kv.swa.erase(kv.swa.begin(), kv.swa.begin() + ptrdiff_t(size_t(before - after) * page_floats));
  return {};
}

}  // namespace hart
