// File: runtime/cache/radix_tree.h
// Internal to runtime/cache: the radix tree of ShadowRadix. Nodes are keyed
// by whole pages of tokens; a node holds full pages (the slot-space source,
// pinned by path locks) and SWA pages (pinned by window locks), or a
// tombstone in place of the SWA pages. The tree holds one reference on every
// page it stores; requests hold their own references (shadow_radix.cpp).
//
// Lock model. A request locks the chain root -> `node`: full_lock_ref += 1 on
// every node of it, and swa_lock_ref += 1 on every live node whose end lies
// past `swa_start` (its last window + one page). lock() first splits the node
// that straddles `swa_start`, so the nodes "end > swa_start" are the same set
// at unlock() time however the tree was split in between (a split copies both
// counters to the new upper piece; tombstones are never revived).
#pragma once

#include "runtime/cache/page_allocator.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace hart::cache {

struct radix_node {
  radix_node* parent = nullptr;
  /// Keyed by the child's first page of tokens.
  std::map<std::vector<int32_t>, std::unique_ptr<radix_node>> children;
  std::vector<int32_t> tokens;  // [n_pages * page_size]
  std::vector<page_id> full;    // [n_pages]
  std::vector<page_id> swa;     // [n_pages], or empty: a tombstone (root: empty too)
  int64_t start = 0;            // tokens from the root to tokens[0]
  int32_t full_lock_ref = 0;    // requests whose chain runs through this node
  int32_t swa_lock_ref = 0;     // requests whose window lock covers this node
  uint64_t last_access = 0;     // LRU clock

  int64_t n_pages() const { return static_cast<int64_t>(full.size()); }
  int64_t end(int64_t page_size) const { return start + n_pages() * page_size; }
  bool tombstoned() const { return swa.empty(); }
};

struct tree_match {
  radix_node* node = nullptr;  // chain end; the root when nothing matched
  int64_t n_tokens = 0;        // page-aligned, == node->end()
};

class radix_tree {
 public:
  radix_tree(int64_t page_size, int64_t window, page_allocator& full, page_allocator& swa);
  ~radix_tree();
  radix_tree(const radix_tree&) = delete;
  radix_tree& operator=(const radix_tree&) = delete;

  radix_node* root() { return root_.get(); }
  const radix_node* root() const { return root_.get(); }
  int64_t page_size() const { return page_size_; }

  /// Longest page-aligned prefix of tokens[0, limit) present in the tree at
  /// whose end at least min(window, end) consecutive live SWA tokens precede.
  /// Splits so the match ends at a node boundary and refreshes the chain's LRU.
  tree_match match(const std::vector<int32_t>& tokens, int64_t limit);

  /// Extends the chain ending at `from` with pages [from.end / P, n_pages) of
  /// a request (tokens, full[], swa[]; swa[j] may be no_page). Pages already
  /// present keep the tree's copy; new nodes take a reference on the
  /// request's pages. Returns the new chain end (a node boundary).
  radix_node* insert(radix_node* from, const std::vector<int32_t>& tokens, const std::vector<page_id>& full,
                     const std::vector<page_id>& swa, int64_t n_pages);

  /// The window-lock start for a chain of n_tree tokens: the first page
  /// that still overlaps [n_tree - window - P, n_tree).
  int64_t window_lock_start(int64_t n_tree) const;
  void lock(radix_node* node, int64_t swa_start);
  void unlock(radix_node* node, int64_t swa_start);

  /// LRU eviction; each returns the pages of its pool it freed (at most n
  /// unless a freed leaf leaves a useless tombstone parent, which goes too).
  int64_t evict_full(int64_t n);
  int64_t evict_swa(int64_t n);
  /// Pages evict_full / evict_swa could free at most.
  int64_t n_evictable_full() const;
  int64_t n_evictable_swa() const;

  int64_t n_evicted_full() const { return n_evicted_full_; }
  int64_t n_tombstoned_swa() const { return n_tombstoned_swa_; }

  /// Visits every non-root node, parents before children.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    visit(root_.get(), fn);
  }

 private:
  template <typename Fn>
  static void visit(const radix_node* n, Fn& fn) {
    for (const auto& kv : n->children) {
      fn(*kv.second);
      visit(kv.second.get(), fn);
    }
  }
  bool page_equals(const radix_node* n, int64_t page, const std::vector<int32_t>& tokens, int64_t pos) const;
  std::vector<int32_t> page_key(const std::vector<int32_t>& tokens, int64_t pos) const;
  /// Splits n after its first n_upper pages; n keeps the lower part (so
  /// pointers to a chain end stay valid) and the new upper part is returned.
  radix_node* split(radix_node* n, int64_t n_upper);
  radix_node* add_child(radix_node* parent, const std::vector<int32_t>& tokens,
                        const std::vector<page_id>& full, const std::vector<page_id>& swa, int64_t first,
                        int64_t last, bool live);
  /// Frees n's pages and removes it (a childless, unlocked node); returns the
  /// full pages freed and adds the SWA pages freed to *n_swa_freed.
  int64_t remove_leaf(radix_node* n, int64_t* n_swa_freed);
  /// Removes childless unlocked tombstones above a removed leaf; returns the
  /// first ancestor that stays (possibly a new leaf).
  radix_node* remove_dead_ancestors(radix_node* n, int64_t* n_full_freed);
  int64_t tombstone(radix_node* n);
  void touch(radix_node* n);

  int64_t page_size_;
  int64_t window_;
  page_allocator& full_;
  page_allocator& swa_;
  std::unique_ptr<radix_node> root_;
  uint64_t clock_ = 0;
  int64_t n_evicted_full_ = 0;
  int64_t n_tombstoned_swa_ = 0;
};

}  // namespace hart::cache
