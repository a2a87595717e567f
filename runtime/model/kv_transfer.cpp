#include "runtime/model/kv_transfer.h"

#include <algorithm>
#include <cstring>

namespace hart {

status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full) {
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
  if (int64_t(pages.full.size()) < n_pages || int64_t(pages.swa.size()) < n_pages) {
    return invalid_argument("kv export: %lld positions need %lld pages, the table has %zu full and %zu SWA",
                            (long long)n_tokens, (long long)n_pages, pages.full.size(), pages.swa.size());
  }
  for (int64_t pg = 0; pg < n_pages; ++pg) {
    const bool full_ok = pg < kv.first_full || (pages.full[pg] >= 0 && pages.full[pg] < store.n_full_pages());
    const bool swa_ok = pg < kv.first_swa || (pages.swa[pg] >= 0 && pages.swa[pg] < store.n_swa_pages());
    if (!full_ok || !swa_ok) {
      return invalid_argument("kv export: page %lld (positions from %lld) is not live in the store",
                              (long long)pg, (long long)(pg * kv.page_size));
    }
  }
  const int64_t F = store.full_page_floats(), S = store.swa_page_floats();
  kv.full.resize(size_t((n_pages - kv.first_full) * F));
  kv.swa.resize(size_t((n_pages - kv.first_swa) * S));
  for (int64_t pg = kv.first_full; pg < n_pages; ++pg) {
    std::memcpy(kv.full.data() + (pg - kv.first_full) * F, store.full_page(pages.full[pg]),
                size_t(F) * sizeof(float));
  }
  for (int64_t pg = kv.first_swa; pg < n_pages; ++pg) {
    std::memcpy(kv.swa.data() + (pg - kv.first_swa) * S, store.swa_page(pages.swa[pg]),
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
      kv.first_swa > n_pages || int64_t(kv.full.size()) != (n_pages - kv.first_full) * F ||
      int64_t(kv.swa.size()) != (n_pages - kv.first_swa) * S) {
    return invalid_argument(
        "kv import: %lld positions in %zu + %zu floats do not match the layout (%lld pages)",
        (long long)kv.n_tokens, kv.full.size(), kv.swa.size(), (long long)n_pages);
  }
  if (int64_t(full.size()) < n_pages || int64_t(swa.size()) < n_pages) {
    return invalid_argument("kv import: %lld positions need %lld pages, the table has %zu full and %zu SWA",
                            (long long)kv.n_tokens, (long long)n_pages, full.size(), swa.size());
  }
  for (int64_t pg = 0; pg < n_pages; ++pg) {
    const bool full_ok = pg < kv.first_full || (full[pg] >= 0 && full[pg] < store.n_full_pages());
    const bool swa_ok = pg < kv.first_swa || (swa[pg] >= 0 && swa[pg] < store.n_swa_pages());
    if (!full_ok || !swa_ok) {
      return invalid_argument("kv import: page %lld (positions from %lld) has no page of this store",
                              (long long)pg, (long long)(pg * kv.page_size));
    }
  }
  for (int64_t pg = kv.first_full; pg < n_pages; ++pg) {
    std::memcpy(store.full_page(full[pg]), kv.full.data() + (pg - kv.first_full) * F,
                size_t(F) * sizeof(float));
  }
  for (int64_t pg = kv.first_swa; pg < n_pages; ++pg) {
    std::memcpy(store.swa_page(swa[pg]), kv.swa.data() + (pg - kv.first_swa) * S, size_t(S) * sizeof(float));
  }
  return {};
}

}  // namespace hart
