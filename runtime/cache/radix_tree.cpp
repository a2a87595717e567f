#include "runtime/cache/radix_tree.h"

#include "runtime/core/check.h"

#include <algorithm>
#include <queue>
#include <utility>

namespace hart::cache {

radix_tree::radix_tree(int64_t page_size, int64_t window, page_allocator& full, page_allocator& swa)
    : page_size_(page_size), window_(window), full_(full), swa_(swa), root_(std::make_unique<radix_node>()) {}

// NOTE(hart): the tree's page references die with the pools it was given;
// shadow_radix destroys the tree and the pools together.
radix_tree::~radix_tree() = default;

std::vector<int32_t> radix_tree::page_key(const std::vector<int32_t>& tokens, int64_t pos) const {
  return std::vector<int32_t>(tokens.begin() + pos, tokens.begin() + pos + page_size_);
}

bool radix_tree::page_equals(const radix_node* n, int64_t page, const std::vector<int32_t>& tokens,
                             int64_t pos) const {
  return std::equal(n->tokens.begin() + page * page_size_, n->tokens.begin() + (page + 1) * page_size_,
                    tokens.begin() + pos);
}

void radix_tree::touch(radix_node* n) {
  const uint64_t t = ++clock_;
  for (; n != root_.get(); n = n->parent) n->last_access = t;
}

int64_t radix_tree::window_lock_start(int64_t n_tree) const {
  const int64_t x = n_tree - window_ - page_size_;
  return x <= 0 ? 0 : x / page_size_ * page_size_;
}

// -- match and insert ---------------------------------------------------------

tree_match radix_tree::match(const std::vector<int32_t>& tokens, int64_t limit) {
  radix_node* node = root_.get();
  int64_t off = 0;  // pages of `node` matched
  int64_t pos = 0;
  int64_t run = 0;  // consecutive live SWA tokens ending at pos
  radix_node* best = root_.get();
  int64_t best_off = 0, best_pos = 0;
  while (pos + page_size_ <= limit) {
    if (off == node->n_pages()) {
      auto it = node->children.find(page_key(tokens, pos));
      if (it == node->children.end()) break;
      node = it->second.get();
      off = 0;
    } else if (!page_equals(node, off, tokens, pos)) {
      break;
    }
    ++off;
    pos += page_size_;
    run = node->tombstoned() ? 0 : run + page_size_;
    if (run >= std::min(window_, pos)) {
      best = node;
      best_off = off;
      best_pos = pos;
    }
  }
  if (best != root_.get() && best_off < best->n_pages()) best = split(best, best_off);
  touch(best);
  return {best, best_pos};
}

radix_node* radix_tree::add_child(radix_node* parent, const std::vector<int32_t>& tokens,
                                  const std::vector<page_id>& full, const std::vector<page_id>& swa,
                                  int64_t first, int64_t last, bool live) {
  auto child = std::make_unique<radix_node>();
  child->parent = parent;
  child->start = first * page_size_;
  child->tokens.assign(tokens.begin() + first * page_size_, tokens.begin() + last * page_size_);
  for (int64_t j = first; j < last; ++j) {
    full_.ref(full[j]);
    child->full.push_back(full[j]);
    if (live) {
      swa_.ref(swa[j]);
      child->swa.push_back(swa[j]);
    }
  }
  radix_node* raw = child.get();
  auto key = page_key(tokens, first * page_size_);
  HART_CHECK(parent->children.count(key) == 0) << "duplicate child at " << first * page_size_;
  parent->children.emplace(std::move(key), std::move(child));
  return raw;
}

radix_node* radix_tree::insert(radix_node* from, const std::vector<int32_t>& tokens,
                               const std::vector<page_id>& full, const std::vector<page_id>& swa,
                               int64_t n_pages) {
  radix_node* node = from;
  int64_t off = node->n_pages();
  int64_t j = node == root_.get() ? 0 : node->end(page_size_) / page_size_;
  while (j < n_pages) {
    if (off == node->n_pages()) {
      auto it = node->children.find(page_key(tokens, j * page_size_));
      if (it == node->children.end()) {
        // New pages: at most a tombstoned run (SWA the request already
        // released) followed by a live run, each one node.
        int64_t k = j;
        while (k < n_pages && swa[k] == no_page) ++k;
        if (k > j) node = add_child(node, tokens, full, swa, j, k, /*live=*/false);
        if (k < n_pages) node = add_child(node, tokens, full, swa, k, n_pages, /*live=*/true);
        off = node->n_pages();
        j = n_pages;
        break;
      }
      node = it->second.get();
      off = 0;
    } else if (!page_equals(node, off, tokens, j * page_size_)) {
      node = split(node, off);
      continue;  // off == node->n_pages(): the next lookup misses and adds.
    }
    // NOTE(hart): the page already exists: the tree keeps its copy and the
    // request keeps reading its own (equal) page, freed when it ends.
    ++off;
    ++j;
  }
  if (node != root_.get() && off < node->n_pages()) node = split(node, off);
  touch(node);
  return node;
}

radix_node* radix_tree::split(radix_node* n, int64_t n_upper) {
  HART_CHECK(n != root_.get() && n_upper > 0 && n_upper < n->n_pages()) << "split " << n_upper;
  radix_node* parent = n->parent;
  auto key = std::vector<int32_t>(n->tokens.begin(), n->tokens.begin() + page_size_);
  auto it = parent->children.find(key);
  HART_CHECK(it != parent->children.end() && it->second.get() == n) << "broken child link";
  std::unique_ptr<radix_node> lower = std::move(it->second);

  auto upper = std::make_unique<radix_node>();
  const int64_t cut = n_upper * page_size_;
  upper->parent = parent;
  upper->start = n->start;
  upper->tokens.assign(n->tokens.begin(), n->tokens.begin() + cut);
  upper->full.assign(n->full.begin(), n->full.begin() + n_upper);
  if (!n->tombstoned()) upper->swa.assign(n->swa.begin(), n->swa.begin() + n_upper);
  upper->full_lock_ref = n->full_lock_ref;
  upper->swa_lock_ref = n->swa_lock_ref;
  upper->last_access = n->last_access;

  n->tokens.erase(n->tokens.begin(), n->tokens.begin() + cut);
  n->full.erase(n->full.begin(), n->full.begin() + n_upper);
  if (!n->tombstoned()) n->swa.erase(n->swa.begin(), n->swa.begin() + n_upper);
  n->start += cut;
  n->parent = upper.get();

  radix_node* raw = upper.get();
  auto lower_key = std::vector<int32_t>(n->tokens.begin(), n->tokens.begin() + page_size_);
  upper->children.emplace(std::move(lower_key), std::move(lower));
  it->second = std::move(upper);
  return raw;
}

// -- locks ---------------------------------------------------------------------

void radix_tree::lock(radix_node* node, int64_t swa_start) {
  for (radix_node* n = node; n != root_.get(); n = n->parent) {
    if (n->start < swa_start && n->end(page_size_) > swa_start) {
      split(n, (swa_start - n->start) / page_size_);
      break;
    }
  }
  for (radix_node* n = node; n != root_.get(); n = n->parent) {
    ++n->full_lock_ref;
    if (!n->tombstoned() && n->end(page_size_) > swa_start) ++n->swa_lock_ref;
  }
}

void radix_tree::unlock(radix_node* node, int64_t swa_start) {
  for (radix_node* n = node; n != root_.get(); n = n->parent) {
    HART_CHECK(n->full_lock_ref > 0) << "path lock underflow at " << n->start;
    --n->full_lock_ref;
    if (!n->tombstoned() && n->end(page_size_) > swa_start) {
      HART_CHECK(n->swa_lock_ref > 0) << "window lock underflow at " << n->start;
      --n->swa_lock_ref;
    }
  }
}

// -- eviction ------------------------------------------------------------------

int64_t radix_tree::remove_leaf(radix_node* n, int64_t* n_swa_freed) {
  HART_CHECK(n != root_.get() && n->children.empty() && n->full_lock_ref == 0 && n->swa_lock_ref == 0)
      << "removing a locked or inner node at " << n->start;
  for (page_id p : n->full) {
    HART_CHECK(full_.unref(p, page_release::cached)) << "unlocked full page " << p << " still held";
  }
  for (page_id p : n->swa) {
    HART_CHECK(swa_.unref(p, page_release::cached)) << "unlocked SWA page " << p << " still held";
  }
  *n_swa_freed += static_cast<int64_t>(n->swa.size());
  const int64_t n_full = n->n_pages();
  radix_node* parent = n->parent;
  auto key = std::vector<int32_t>(n->tokens.begin(), n->tokens.begin() + page_size_);
  HART_CHECK(parent->children.erase(key) == 1) << "broken child link";
  return n_full;
}

radix_node* radix_tree::remove_dead_ancestors(radix_node* n, int64_t* n_full_freed) {
  int64_t n_swa = 0;
  while (n != root_.get() && n->children.empty() && n->tombstoned() && n->full_lock_ref == 0) {
    radix_node* parent = n->parent;
    *n_full_freed += remove_leaf(n, &n_swa);
    n = parent;
  }
  return n;
}

int64_t radix_tree::tombstone(radix_node* n) {
  HART_CHECK(n->swa_lock_ref == 0 && !n->tombstoned()) << "tombstoning a window-locked node";
  for (page_id p : n->swa) {
    HART_CHECK(swa_.unref(p, page_release::cached)) << "unlocked SWA page " << p << " still held";
  }
  const int64_t n_freed = static_cast<int64_t>(n->swa.size());
  n->swa.clear();
  return n_freed;
}

int64_t radix_tree::evict_full(int64_t n) {
  auto newer = [](const radix_node* a, const radix_node* b) { return a->last_access > b->last_access; };
  std::priority_queue<radix_node*, std::vector<radix_node*>, decltype(newer)> leaves(newer);
  for_each([&](const radix_node& x) {
    if (x.children.empty() && x.full_lock_ref == 0) leaves.push(const_cast<radix_node*>(&x));
  });
  int64_t n_freed = 0, n_swa_freed = 0;
  while (n_freed < n && !leaves.empty()) {
    radix_node* x = leaves.top();
    leaves.pop();
    const int64_t need = n - n_freed;
    if (x->n_pages() > need) split(x, x->n_pages() - need);  // evict the tail only
    radix_node* parent = x->parent;
    n_freed += remove_leaf(x, &n_swa_freed);
    radix_node* p = remove_dead_ancestors(parent, &n_freed);
    if (p != root_.get() && p->children.empty() && p->full_lock_ref == 0) leaves.push(p);
  }
  n_evicted_full_ += n_freed;
  n_tombstoned_swa_ += n_swa_freed;
  return n_freed;
}

int64_t radix_tree::evict_swa(int64_t n) {
  std::vector<radix_node*> live;
  for_each([&](const radix_node& x) {
    if (!x.tombstoned() && x.swa_lock_ref == 0) live.push_back(const_cast<radix_node*>(&x));
  });
  std::stable_sort(live.begin(), live.end(),
                   [](const radix_node* a, const radix_node* b) { return a->last_access < b->last_access; });
  int64_t n_freed = 0;
  for (radix_node* x : live) {
    if (n_freed >= n) break;
    const int64_t need = n - n_freed;
    if (x->children.empty() && x->full_lock_ref == 0) {
      // A leaf goes entirely (its tail when only part is needed).
      if (x->n_pages() > need) split(x, x->n_pages() - need);
      radix_node* parent = x->parent;
      int64_t n_full = remove_leaf(x, &n_freed);
      remove_dead_ancestors(parent, &n_full);
      n_evicted_full_ += n_full;
    } else {
      // An inner node keeps its full pages (still shared as a prefix) and
      // loses its SWA; the oldest pages go first so the tail stays matchable.
      n_freed += tombstone(x->n_pages() > need ? split(x, need) : x);
    }
  }
  n_tombstoned_swa_ += n_freed;
  return n_freed;
}

int64_t radix_tree::n_evictable_full() const {
  int64_t n = 0;
  for_each([&](const radix_node& x) { n += x.full_lock_ref == 0 ? x.n_pages() : 0; });
  return n;
}

int64_t radix_tree::n_evictable_swa() const {
  int64_t n = 0;
  for_each([&](const radix_node& x) { n += !x.tombstoned() && x.swa_lock_ref == 0 ? x.n_pages() : 0; });
  return n;
}

}  // namespace hart::cache
