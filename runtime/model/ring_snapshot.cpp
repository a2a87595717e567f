#include "runtime/model/ring_snapshot.h"

#include "runtime/core/check.h"
#include "runtime/model/kv_store.h"

namespace hart {
namespace {

int32_t swa_page_of(const page_table& pages, int64_t pos) {
  const int64_t pg = pos / pages.store->page_size();
  HART_CHECK(pg < int64_t(pages.swa.size()) && pages.swa[pg] >= 0)
      << "position " << pos << " has no SWA page";
  return pages.swa[pg];
}

}  // namespace

void ring_snapshot_take(const page_table& pages, int64_t first, int64_t n, ring_snapshot* snap) {
  const kv_store& store = *pages.store;
  const int64_t w = store.position_ring_floats();
  snap->pages = &pages;
  snap->first = first;
  snap->n = n;
  snap->rows.resize(n * w);
  if (w == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    store.ring_rows_save(swa_page_of(pages, first + j), first + j, snap->rows.data() + j * w);
  }
}

void ring_snapshot_restore(const ring_snapshot& snap, const page_table& pages, int64_t from) {
  const kv_store& store = *pages.store;
  const int64_t w = store.position_ring_floats();
  if (w == 0) return;
  for (int64_t pos = from; pos < snap.first + snap.n; ++pos) {
    store.ring_rows_restore(swa_page_of(pages, pos), pos, snap.rows.data() + (pos - snap.first) * w);
  }
}

}  // namespace hart
