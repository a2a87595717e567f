// The invariant checker and the metrics of shadow_radix (see
// docs/shadowradix.md, "Invariants"). O(pages + tokens on request chains).
#include "runtime/cache/shadow_radix.h"
#include "runtime/cache/shadow_radix_impl.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace hart::cache {
namespace {

struct page_holders {
  explicit page_holders(int64_t n) : n_holders(n, 0), tree_owner(n, nullptr) {}
  std::vector<int32_t> n_holders;             // [capacity] tree node entries + request entries
  std::vector<const radix_node*> tree_owner;  // [capacity] the node storing the page
};

status check_page_ref(const page_allocator& a, const char* pool, int64_t p) {
  if (p < 0 || p >= a.capacity())
    return internal_error("%s: bad page id %lld", pool, static_cast<long long>(p));
  if (a.refcount(static_cast<page_id>(p)) <= 0) {
    return internal_error("%s: page %lld is held but free", pool, static_cast<long long>(p));
  }
  return status::ok_status();
}

status check_tree(const radix_tree& tree, const page_allocator& full, const page_allocator& swa,
                  page_holders& fh, page_holders& sh) {
  const int64_t P = tree.page_size();
  status st;
  tree.for_each([&](const radix_node& n) {
    if (!st.ok()) return;
    const long long at = static_cast<long long>(n.start);
    const radix_node* parent = n.parent;
    const int64_t parent_end = parent == tree.root() ? 0 : parent->end(P);
    if (n.n_pages() < 1 || static_cast<int64_t>(n.tokens.size()) != n.n_pages() * P ||
        (!n.tombstoned() && n.swa.size() != n.full.size()) || n.start != parent_end) {
      st = internal_error("tree: malformed node at %lld", at);
      return;
    }
    auto it = parent->children.find(std::vector<int32_t>(n.tokens.begin(), n.tokens.begin() + P));
    if (it == parent->children.end() || it->second.get() != &n) {
      st = internal_error("tree: node at %lld is not its parent's child under its first page", at);
      return;
    }
    if (n.full_lock_ref < 0 || n.swa_lock_ref < 0 || n.swa_lock_ref > n.full_lock_ref ||
        (n.tombstoned() && n.swa_lock_ref != 0) ||
        (parent != tree.root() && n.full_lock_ref > parent->full_lock_ref)) {
      st = internal_error("tree: node at %lld has inconsistent locks full=%d swa=%d tombstone=%d", at,
                          n.full_lock_ref, n.swa_lock_ref, n.tombstoned() ? 1 : 0);
      return;
    }
    for (page_id p : n.full) {
      st = check_page_ref(full, "full", p);
      if (!st.ok()) return;
      if (fh.tree_owner[p]) {
        st = internal_error("tree: full page %d stored twice", p);
        return;
      }
      fh.tree_owner[p] = &n;
      ++fh.n_holders[p];
    }
    for (page_id p : n.swa) {
      st = check_page_ref(swa, "swa", p);
      if (!st.ok()) return;
      if (sh.tree_owner[p]) {
        st = internal_error("tree: SWA page %d stored twice", p);
        return;
      }
      sh.tree_owner[p] = &n;
      ++sh.n_holders[p];
    }
  });
  return st;
}

using lock_counts = std::unordered_map<const radix_node*, std::pair<int32_t, int32_t>>;

status check_request(const cache_state& m, request_id id, const request_state& r, page_holders& fh,
                     page_holders& sh, lock_counts& locks) {
  const int64_t P = m.cfg.page_size;
  const request_pages& pg = r.pages;
  const long long rid = static_cast<long long>(id);
  const int64_t n_pages = static_cast<int64_t>(pg.full.size());
  if (static_cast<int64_t>(pg.swa.size()) != n_pages || pg.n_reserved != n_pages * P || pg.n_cached < 0 ||
      pg.n_cached > pg.n_computed || pg.n_computed > pg.n_reserved || pg.n_cached % P != 0 ||
      static_cast<int64_t>(r.tokens.size()) < pg.n_computed) {
    return internal_error("request %lld: inconsistent sizes", rid);
  }
  // Chain: page-aligned, at most what was computed, tokens equal the request's.
  const int64_t chain_end = r.chain_end == m.tree.root() ? 0 : r.chain_end->end(P);
  if (r.n_tree != chain_end || r.n_tree < pg.n_cached || r.n_tree > pg.n_computed ||
      r.lock_swa_start != m.tree.window_lock_start(r.n_tree)) {
    return internal_error("request %lld: chain end %lld vs n_tree %lld", rid,
                          static_cast<long long>(chain_end), static_cast<long long>(r.n_tree));
  }
  for (const radix_node* n = r.chain_end; n != m.tree.root(); n = n->parent) {
    auto& c = locks[n];
    ++c.first;
    if (!n->tombstoned() && n->end(P) > r.lock_swa_start) ++c.second;
    if (!std::equal(n->tokens.begin(), n->tokens.end(), r.tokens.begin() + n->start)) {
      return internal_error("request %lld: chain node at %lld holds other tokens", rid,
                            static_cast<long long>(n->start));
    }
    for (int64_t i = 0; i < n->n_pages(); ++i) {
      const int64_t j = n->start / P + i;
      if (j < pg.n_cached / P && pg.full[j] != n->full[i]) {
        return internal_error("request %lld: cached page %lld is not the tree's", rid,
                              static_cast<long long>(j));
      }
    }
  }
  // SWA: freed before the window (minus a page of margin), live in it.
  const int64_t first_kept = m.first_swa_page(pg.n_computed);
  const int64_t first_needed = std::max<int64_t>(0, pg.n_computed - m.cfg.window) / P;
  for (int64_t j = 0; j < n_pages; ++j) {
    if ((j < first_kept && pg.swa[j] != no_page) || (j >= first_needed && pg.swa[j] == no_page)) {
      return internal_error("request %lld: SWA page %lld is %s at n_computed=%lld", rid,
                            static_cast<long long>(j), pg.swa[j] == no_page ? "missing" : "kept",
                            static_cast<long long>(pg.n_computed));
    }
  }
  for (int pool = 0; pool < 2; ++pool) {
    const std::vector<page_id>& table = pool == 0 ? pg.full : pg.swa;
    page_holders& h = pool == 0 ? fh : sh;
    const page_allocator& a = pool == 0 ? m.full : m.swa;
    std::unordered_map<page_id, int> seen;
    for (page_id p : table) {
      if (p == no_page && pool == 1) continue;
      HART_RETURN_IF_ERROR(check_page_ref(a, pool == 0 ? "full" : "swa", p));
      if (seen[p]++) return internal_error("request %lld: page %d twice in its table", rid, p);
      ++h.n_holders[p];
      // A tree page a request reads must be pinned by that request's locks.
      const radix_node* owner = h.tree_owner[p];
      if (owner && (pool == 0 ? owner->full_lock_ref : owner->swa_lock_ref) == 0) {
        return internal_error("request %lld reads unlocked tree %s page %d", rid, pool == 0 ? "full" : "SWA",
                              p);
      }
    }
  }
  return status::ok_status();
}

status check_holders(const page_allocator& a, const page_holders& h, const char* pool) {
  for (int64_t p = 0; p < a.capacity(); ++p) {
    const int32_t rc = a.refcount(static_cast<page_id>(p));
    if (rc != h.n_holders[p]) {
      return internal_error("%s: page %lld has refcount %d but %d holders", pool, static_cast<long long>(p),
                            rc, h.n_holders[p]);
    }
    if (!h.tree_owner[p] && h.n_holders[p] > 1) {
      return internal_error("%s: private page %lld held by %d requests", pool, static_cast<long long>(p),
                            h.n_holders[p]);
    }
  }
  return status::ok_status();
}

}  // namespace

status shadow_radix::check() const {
  const impl& m = *impl_;
  HART_RETURN_IF_ERROR(m.full.check("full"));
  HART_RETURN_IF_ERROR(m.swa.check("swa"));
  page_holders fh(m.full.capacity()), sh(m.swa.capacity());
  HART_RETURN_IF_ERROR(check_tree(m.tree, m.full, m.swa, fh, sh));
  lock_counts locks;
  for (const auto& kv : m.requests) {
    HART_RETURN_IF_ERROR(check_request(m, kv.first, kv.second, fh, sh, locks));
  }
  HART_RETURN_IF_ERROR(check_holders(m.full, fh, "full"));
  HART_RETURN_IF_ERROR(check_holders(m.swa, sh, "swa"));
  status st;
  m.tree.for_each([&](const radix_node& n) {
    if (!st.ok()) return;
    auto it = locks.find(&n);
    const auto want = it == locks.end() ? std::pair<int32_t, int32_t>{0, 0} : it->second;
    if (n.full_lock_ref != want.first || n.swa_lock_ref != want.second) {
      st = internal_error("locks unbalanced at node %lld: full %d (requests hold %d), swa %d (%d)",
                          static_cast<long long>(n.start), n.full_lock_ref, want.first, n.swa_lock_ref,
                          want.second);
    }
  });
  return st;
}

cache_metrics shadow_radix::metrics() const {
  const impl& m = *impl_;
  cache_metrics out;
  out.requests = m.n_requests;
  out.prompt_tokens = m.n_prompt_tokens;
  out.cached_tokens = m.n_cached_tokens;
  out.evicted_full_pages = m.tree.n_evicted_full();
  out.tombstoned_swa_pages = m.tree.n_tombstoned_swa() + m.n_window_freed_swa;
  out.full_pages_used = m.full.n_used();
  out.full_pages_total = m.full.capacity();
  out.swa_pages_used = m.swa.n_used();
  out.swa_pages_total = m.swa.capacity();
  m.tree.for_each([&](const radix_node& n) {
    out.tree_full_tokens += n.n_pages() * m.cfg.page_size;
    if (!n.tombstoned()) out.tree_swa_tokens += n.n_pages() * m.cfg.page_size;
  });
  return out;
}

}  // namespace hart::cache
