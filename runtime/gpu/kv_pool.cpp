#include "runtime/gpu/kv_pool.h"

#include "runtime/model/kv_page_layout.h"

#include <climits>

namespace hart::gpu {

status_or<kv_pool> kv_pool::create(const model_config& cfg, int64_t P, int64_t n_full, int64_t n_swa,
                                   bool entries) {
  if (n_full <= 0 || n_swa <= 0) {
    return invalid_argument("gpu engine: KV pool needs pages (full %lld, swa %lld)", (long long)n_full,
                            (long long)n_swa);
  }
  HART_ASSIGN_OR_RETURN(const kv_page_layout l, kv_page_layout_make(cfg, P, entries));
  kv_pool k;
  k.page_size_ = P;
  k.hd_ = cfg.head_dim;
  k.n_full_ = n_full;
  k.n_swa_ = n_swa;
  k.full_floats_ = l.full_floats;
  const int64_t swa0 = n_full * l.full_floats;
  k.layers_.resize(l.layers.size());
  for (size_t il = 0; il < l.layers.size(); ++il) {
    const kv_layer_sections& x = l.layers[il];
    kv_layer_addr& a = k.layers_[il];
    a.page_size = P;  // the pool's geometry, in every layer's copy
    a.hd = cfg.head_dim;
    a.dI = cfg.index_head_dim;
    a.csa_rate = cfg.csa_rate;
    a.full_floats = l.full_floats;
    a.swa_floats = l.swa_floats;
    a.swa0 = swa0;
    a.slot_floats = l.slot_floats;
    a.entries = entries;
    a.rate = x.rate;
    a.ring = x.ring;
    a.ring_width = x.ring_width;
    a.window_off = x.window_off;
    a.ring_off = x.ring_off;
    a.index_ring_off = x.index_ring_off;
    a.entry_off = x.entry_off;
    a.index_off = x.index_off;
  }
  const int64_t total = swa0 + n_swa * l.swa_floats;
  const int64_t hd = k.hd_;
  k.n_rows_ = total / hd;
  if (k.n_rows_ > INT_MAX) {
    return invalid_argument(
        "gpu engine: KV pool of %lld rows does not fit int32 row indices; use fewer pages",
        (long long)k.n_rows_);
  }
  HART_ASSIGN_OR_RETURN(k.buf_, device_buffer::create(size_t(total) * sizeof(float)));
  return k;
}

kv_entry_pool kv_pool::window_pool(int64_t il) const {
  const kv_layer_addr& l = layers_[il];
  return {reinterpret_cast<const uint8_t*>(base() + l.swa0 + l.window_off), page_size_,
          l.swa_floats * int64_t(sizeof(float))};
}

kv_entry_pool kv_pool::entry_pool(int64_t il) const {
  const kv_layer_addr& l = layers_[il];
  return {reinterpret_cast<const uint8_t*>(base() + l.entry_off), page_size_ / l.rate,
          l.full_floats * int64_t(sizeof(float))};
}

}  // namespace hart::gpu
