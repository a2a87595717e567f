// File: runtime/gpu/kv_pool.h
// The GPU engine's KV pages: one device buffer of fp32, allocated at load,
// holding `n_full` full pages then `n_swa` SWA pages with kv_store's layout
// (runtime/model/kv_store.h): a full page carries every CSA/HCA layer's
// compressed entries and the CSA layers' indexer keys for its P positions;
// an SWA page carries every layer's window KV and the compressor rings (CSA
// 2m rows, HCA m rows, indexer 2·4 rows of [kv | gate + bias], row pos % ring).
// Every section starts at a multiple of head_dim floats. Window KV and
// compressed entries are fp32 rows of one [head_dim, n_rows] matrix that the
// gathered sparse attention indexes with int32 row numbers, or (`entries`)
// 584-byte FP8 entries packed in their sections, which A1 reads as two pools
// per layer (window slots, entry slots: window_pool / entry_pool).
#pragma once

#include "kernels/sparse_decode_attention/kv_entry.h"
#include "runtime/core/status.h"
#include "runtime/gpu/device_memory.h"
#include "runtime/gpu/kv_layer_addr.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <vector>

namespace hart::gpu {

class kv_pool {
 public:
  /// Page layout: runtime/model/kv_page_layout.h (the memory plan sizes the pool with it).
  /// invalid_argument when the rows would not fit int32; resource_exhausted
  /// when the device has no room. `entries`: window KV and main entries as
  /// FP8 entries (kv_entry.h; head_dim must be 512).
  static status_or<kv_pool> create(const model_config& cfg, int64_t page_size, int64_t n_full, int64_t n_swa,
                                   bool entries);

  float* base() const { return static_cast<float*>(buf_.get()); }
  int64_t page_size() const { return page_size_; }
  int64_t n_full() const { return n_full_; }
  int64_t n_swa() const { return n_swa_; }
  int64_t n_rows() const { return n_rows_; }  // rows of head_dim in the whole pool
  int64_t full_page_rows() const { return full_floats_ / hd_; }
  size_t bytes() const { return buf_.bytes(); }

  /// Layer il's addresses (float offsets from base()); the device kernels take it by value.
  const kv_layer_addr& layer(int64_t il) const { return layers_[il]; }
  // Float offsets from base(); `off` is p % P, `pos` the absolute position.
  int64_t window(int64_t il, int32_t swa_page, int64_t off) const {
    return layers_[il].window(swa_page, off);
  }
  int64_t entry(int64_t il, int32_t full_page, int64_t off) const {
    return layers_[il].entry(full_page, off);
  }
  int64_t index_key(int64_t il, int32_t full_page, int64_t off) const {
    return layers_[il].index_key(full_page, off);
  }
  int64_t ring(int64_t il, int32_t swa_page, int64_t pos) const {
    return layers_[il].ring_row(swa_page, pos);
  }
  int64_t index_ring(int64_t il, int32_t swa_page, int64_t pos) const {
    return layers_[il].index_ring(swa_page, pos);
  }
  /// The layer's first entry row inside a full page (entry(il, p, 0) / head_dim − p · full_page_rows).
  int64_t entry_row0(int64_t il) const { return layers_[il].entry_off / hd_; }
  /// FP8 entries: layer il's window slots (swa_page · P + off) and entry
  /// slots (full_page · P / rate + off / rate) as A1 reads them.
  kv_entry_pool window_pool(int64_t il) const;
  kv_entry_pool entry_pool(int64_t il) const;

 private:
  int64_t page_size_ = 0, hd_ = 0;
  int64_t n_full_ = 0, n_swa_ = 0, n_rows_ = 0;
  int64_t full_floats_ = 0;
  std::vector<kv_layer_addr> layers_;
  device_buffer buf_;
};

}  // namespace hart::gpu
