#include "runtime/gpu/kv_pool.h"

#include <climits>

namespace hart::gpu {

status_or<kv_pool> kv_pool::create(const model_config& cfg, int64_t P, int64_t n_full, int64_t n_swa, bool entries) {
  if (n_full <= 0 || n_swa <= 0) {
    return invalid_argument("gpu engine: KV pool needs pages (full %lld, swa %lld)", (long long)n_full, (long long)n_swa);
  }
  kv_pool k;
  k.page_size_ = P;
  k.hd_ = cfg.head_dim;
  k.n_full_ = n_full;
  k.n_swa_ = n_swa;
  const int64_t hd = k.hd_, dI = cfg.index_head_dim;
  if (entries && hd != kv_entry_dim) {
    return invalid_argument("gpu engine: FP8 KV entries need head_dim %lld, not %lld", (long long)kv_entry_dim,
                            (long long)hd);
  }
  const int64_t slot = entries ? kv_entry_bytes / int64_t(sizeof(float)) : hd;  // floats per window / entry slot
  auto rows = [hd](int64_t floats) { return (floats + hd - 1) / hd * hd; };  // sections start on a row
  int64_t full_floats = 0, swa_floats = 0;
  k.layers_.resize(cfg.n_layers);
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    kv_layer_addr& l = k.layers_[il];
    const attention_kind kind = cfg.layer_kinds[il];
    l.window_off = swa_floats;
    swa_floats += rows(P * slot);
    if (kind == attention_kind::sliding) continue;
    const bool csa = kind == attention_kind::csa;
    l.rate = cfg.compress_rate(kind);
    l.ring = csa ? 2 * l.rate : l.rate;
    l.ring_width = 2 * (csa ? 2 : 1) * hd;
    l.ring_off = swa_floats;
    swa_floats += rows(l.ring * l.ring_width);
    l.entry_off = full_floats;
    full_floats += rows(P / l.rate * slot);
    if (csa) {
      l.index_ring_off = swa_floats;
      swa_floats += rows(2 * cfg.csa_rate * 4 * dI);
      l.index_off = full_floats;
      full_floats += rows(P / cfg.csa_rate * dI);
    }
  }
  if (full_floats == 0) full_floats = hd;  // all-SWA models still get addressable pages
  k.full_floats_ = full_floats;
  const int64_t swa0 = n_full * full_floats;
  for (kv_layer_addr& l : k.layers_) {  // the pool's geometry, in every layer's copy
    l.page_size = P;
    l.hd = hd;
    l.dI = dI;
    l.csa_rate = cfg.csa_rate;
    l.full_floats = full_floats;
    l.swa_floats = swa_floats;
    l.swa0 = swa0;
    l.slot_floats = slot;
    l.entries = entries;
  }
  const int64_t total = swa0 + n_swa * swa_floats;
  k.n_rows_ = total / hd;
  if (k.n_rows_ > INT_MAX) {
    return invalid_argument("gpu engine: KV pool of %lld rows does not fit int32 row indices; use fewer pages",
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
