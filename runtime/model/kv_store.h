// File: runtime/model/kv_store.h
// The engine's paged KV memory (CPU, fp32). Two kinds of pages, as
// ShadowRadix hands them out (docs/shadowradix.md):
// - a full page holds, for positions [page·P, page·P + P), the compressed
//   entries of every CSA/HCA layer (P/m rows each) and the CSA layers'
//   indexer keys (P/4 rows): the arithmetic shadows of the virtual slots;
// - an SWA page holds the same positions' sliding-window KV for every layer
//   and the compressor-state rings: CSA 8 rows (this block + the previous
//   block's overlap half), HCA m rows, the indexer 8 rows; a row is one
//   token's [kv | gate + position bias]. A ring row is addressed by pos % ring,
//   so a page's last 4 positions stay in its ring after the page is full:
//   a request continuing at the page edge finds the previous block's half there.
// Page ids are dense and stable; storage grows on demand.
// A position's "ring rows" are its row in every ring of every layer: what a
// speculative verify pass overwrites and a rollback puts back
// (ring_snapshot.h).
#pragma once

#include "runtime/model/config.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace hart {

/// How many positions behind the newest a decode step still reads from SWA
/// pages (the window and the compressor rings): older SWA pages may be freed.
int64_t swa_live_tokens(const model_config& cfg);

class kv_store {
 public:
  /// `n_mtp_layers`: MTP blocks whose window KV the SWA pages also hold, as
  /// layers cfg.n_layers + i (window only: the MTP block is SWA-only).
  kv_store(const model_config& cfg, int64_t page_size, int64_t n_mtp_layers = 0);

  int64_t page_size() const { return page_size_; }

  /// Pages ids [0, n) exist afterwards (ShadowRadix-managed pools).
  void ensure_full_pages(int64_t n);
  void ensure_swa_pages(int64_t n);
  int64_t n_full_pages() const { return int64_t(full_.size()); }
  int64_t n_swa_pages() const { return int64_t(swa_.size()); }

  /// Simple free-list allocation for sequences the engine manages itself.
  int32_t alloc_full();
  int32_t alloc_swa();
  void free_full(int32_t page);
  void free_swa(int32_t page);

  // Row pointers; `off` is the position's offset inside its page (p % P).
  float* window_row(int64_t il, int32_t swa_page, int64_t off) const;
  float* entry_row(int64_t il, int32_t full_page, int64_t off) const;      // off / m inside
  float* index_key_row(int64_t il, int32_t full_page, int64_t off) const;  // off / csa_rate inside
  float* ring_row(int64_t il, int32_t swa_page, int64_t pos) const;        // row pos % ring
  float* index_ring_row(int64_t il, int32_t swa_page, int64_t pos) const;

  int64_t ring_rows(int64_t il) const { return layers_[il].ring; }
  /// The fewest rows of any ring (0 for an all-SWA model): that many
  /// consecutive positions never share a ring row.
  int64_t min_ring_rows() const { return min_ring_; }
  /// Floats of one position's ring rows, all rings of all layers together.
  int64_t position_ring_floats() const { return position_ring_floats_; }
  /// Copies the ring rows of `pos` (in `swa_page`, the page of pos) out to
  /// `dst` [position_ring_floats], or back in from `src`.
  void ring_rows_save(int32_t swa_page, int64_t pos, float* dst) const;
  void ring_rows_restore(int32_t swa_page, int64_t pos, const float* src) const;
  int64_t full_page_floats() const { return full_floats_; }
  int64_t swa_page_floats() const { return swa_floats_; }
  /// A page's floats, whole (kv_transfer.h moves pages this way).
  float* full_page(int32_t page) const { return full_[page].get(); }
  float* swa_page(int32_t page) const { return swa_[page].get(); }
  /// Equal for two stores exactly when their pages are laid out alike (page
  /// size, every layer's kind, rate, rings and offsets, head and index dims).
  uint64_t layout_id() const { return layout_id_; }

 private:
  struct layer_layout {
    int64_t rate = 0;        // m (0 for SWA layers)
    int64_t ring = 0;        // ring rows: 2m for CSA (overlap), m for HCA
    int64_t ring_width = 0;  // floats per ring row: 2 · coff · c
    bool indexer = false;    // CSA: the indexer's ring too
    int64_t window_off = 0;  // offsets (floats) inside an SWA page
    int64_t ring_off = 0, index_ring_off = 0;
    int64_t entry_off = 0, index_off = 0;  // offsets inside a full page
  };
  // An indexer ring row: [kv | gate] of both overlap halves.
  int64_t index_ring_width() const { return 2 * 2 * index_dim_; }

  int64_t page_size_;
  int64_t head_dim_, index_dim_, csa_rate_;
  int64_t full_floats_ = 0, swa_floats_ = 0;
  int64_t min_ring_ = 0, position_ring_floats_ = 0;
  std::vector<layer_layout> layers_;
  uint64_t layout_id_ = 0;
  std::vector<std::unique_ptr<float[]>> full_, swa_;
  std::vector<int32_t> free_full_, free_swa_;
};

}  // namespace hart
