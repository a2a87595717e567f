#include "runtime/model/kv_store.h"

#include "runtime/core/check.h"
#include "runtime/model/sequence_state.h"

#include <algorithm>

namespace hart {

kv_store::kv_store(const model_config& cfg, int64_t page_size, int64_t n_mtp_layers)
    : page_size_(page_size),
      head_dim_(cfg.head_dim),
      index_dim_(cfg.index_head_dim),
      csa_rate_(cfg.csa_rate) {
  HART_CHECK(page_size > 0 && page_size % cfg.csa_rate == 0 && page_size % cfg.hca_rate == 0 &&
             page_size >= cfg.window)
      << "page size " << page_size << " must be a multiple of every compress rate and >= the window";
  layers_.resize(cfg.n_layers + n_mtp_layers);
  for (int64_t il = 0; il < int64_t(layers_.size()); ++il) {
    layer_layout& l = layers_[il];
    const attention_kind k = il < cfg.n_layers ? cfg.layer_kinds[il] : attention_kind::sliding;
    l.window_off = swa_floats_;
    swa_floats_ += page_size * head_dim_;
    if (k == attention_kind::sliding) continue;
    l.rate = cfg.compress_rate(k);
    const bool csa = k == attention_kind::csa;
    l.ring = csa ? 2 * l.rate : l.rate;
    l.ring_width = 2 * (csa ? 2 : 1) * head_dim_;
    l.ring_off = swa_floats_;
    swa_floats_ += l.ring * l.ring_width;
    l.entry_off = full_floats_;
    full_floats_ += page_size / l.rate * head_dim_;
    if (csa) {
      l.indexer = true;
      l.index_ring_off = swa_floats_;
      swa_floats_ += 2 * csa_rate_ * index_ring_width();
      l.index_off = full_floats_;
      full_floats_ += page_size / csa_rate_ * index_dim_;
      position_ring_floats_ += index_ring_width();
    }
    min_ring_ = min_ring_ == 0 ? l.ring : std::min(min_ring_, l.ring);
    position_ring_floats_ += l.ring_width;
  }
  if (full_floats_ == 0) full_floats_ = 1;  // all-SWA models still get addressable pages
  // FNV-1a over every number that places a float in a page.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ uint64_t((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (int64_t v : {page_size_, head_dim_, index_dim_, csa_rate_, full_floats_, swa_floats_}) mix(v);
  for (const layer_layout& l : layers_) {
    for (int64_t v :
         {l.rate, l.ring, l.ring_width, l.window_off, l.ring_off, l.index_ring_off, l.entry_off, l.index_off})
      mix(v);
  }
  layout_id_ = h;
}

int64_t swa_live_tokens(const model_config& cfg) {
  return std::max<int64_t>(cfg.window, 2 * cfg.csa_rate);
}

void kv_store::ensure_full_pages(int64_t n) {
  while (int64_t(full_.size()) < n) full_.emplace_back(new float[full_floats_]);
}

void kv_store::ensure_swa_pages(int64_t n) {
  while (int64_t(swa_.size()) < n) swa_.emplace_back(new float[swa_floats_]);
}

int32_t kv_store::alloc_full() {
  if (free_full_.empty()) {
    ensure_full_pages(n_full_pages() + 1);
    return int32_t(n_full_pages() - 1);
  }
  const int32_t p = free_full_.back();
  free_full_.pop_back();
  return p;
}

int32_t kv_store::alloc_swa() {
  if (free_swa_.empty()) {
    ensure_swa_pages(n_swa_pages() + 1);
    return int32_t(n_swa_pages() - 1);
  }
  const int32_t p = free_swa_.back();
  free_swa_.pop_back();
  return p;
}

void kv_store::free_full(int32_t page) {
  HART_CHECK(page >= 0 && page < n_full_pages()) << "full page " << page;
  free_full_.push_back(page);
}

void kv_store::free_swa(int32_t page) {
  HART_CHECK(page >= 0 && page < n_swa_pages()) << "swa page " << page;
  free_swa_.push_back(page);
}

float* kv_store::window_row(int64_t il, int32_t swa_page, int64_t off) const {
  return swa_[swa_page].get() + layers_[il].window_off + off * head_dim_;
}

float* kv_store::entry_row(int64_t il, int32_t full_page, int64_t off) const {
  return full_[full_page].get() + layers_[il].entry_off + (off / layers_[il].rate) * head_dim_;
}

float* kv_store::index_key_row(int64_t il, int32_t full_page, int64_t off) const {
  return full_[full_page].get() + layers_[il].index_off + (off / csa_rate_) * index_dim_;
}

float* kv_store::ring_row(int64_t il, int32_t swa_page, int64_t pos) const {
  const layer_layout& l = layers_[il];
  return swa_[swa_page].get() + l.ring_off + (pos % l.ring) * l.ring_width;
}

float* kv_store::index_ring_row(int64_t il, int32_t swa_page, int64_t pos) const {
  return swa_[swa_page].get() + layers_[il].index_ring_off + (pos % (2 * csa_rate_)) * index_ring_width();
}

void kv_store::ring_rows_save(int32_t swa_page, int64_t pos, float* dst) const {
  for (int64_t il = 0; il < int64_t(layers_.size()); ++il) {
    const layer_layout& l = layers_[il];
    if (l.ring == 0) continue;
    dst = std::copy_n(ring_row(il, swa_page, pos), l.ring_width, dst);
    if (l.indexer) dst = std::copy_n(index_ring_row(il, swa_page, pos), index_ring_width(), dst);
  }
}

void kv_store::ring_rows_restore(int32_t swa_page, int64_t pos, const float* src) const {
  for (int64_t il = 0; il < int64_t(layers_.size()); ++il) {
    const layer_layout& l = layers_[il];
    if (l.ring == 0) continue;
    std::copy_n(src, l.ring_width, ring_row(il, swa_page, pos));
    src += l.ring_width;
    if (l.indexer) {
      std::copy_n(src, index_ring_width(), index_ring_row(il, swa_page, pos));
      src += index_ring_width();
    }
  }
}

}  // namespace hart

namespace hart {

page_table::~page_table() {
  if (!owned || !store) return;
  for (int32_t p : full) {
    if (p >= 0) store->free_full(p);
  }
  for (int32_t p : swa) {
    if (p >= 0) store->free_swa(p);
  }
}

}  // namespace hart
