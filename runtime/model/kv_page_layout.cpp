#include "runtime/model/kv_page_layout.h"

#include "kernels/sparse_decode_attention/kv_entry.h"

namespace hart {

status_or<kv_page_layout> kv_page_layout_make(const model_config& cfg, int64_t P, bool entries) {
  const int64_t hd = cfg.head_dim, dI = cfg.index_head_dim;
  if (entries && hd != kv_entry_dim) {
    return invalid_argument("gpu engine: FP8 KV entries need head_dim %lld, not %lld",
                            (long long)kv_entry_dim, (long long)hd);
  }
  kv_page_layout k;
  k.slot_floats = entries ? kv_entry_bytes / int64_t(sizeof(float)) : hd;
  auto rows = [hd](int64_t floats) { return (floats + hd - 1) / hd * hd; };  // sections start on a row
  k.layers.resize(cfg.n_layers);
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    kv_layer_sections& l = k.layers[il];
    const attention_kind kind = cfg.layer_kinds[il];
    l.window_off = k.swa_floats;
    k.swa_floats += rows(P * k.slot_floats);
    if (kind == attention_kind::sliding) continue;
    const bool csa = kind == attention_kind::csa;
    l.rate = cfg.compress_rate(kind);
    l.ring = csa ? 2 * l.rate : l.rate;
    l.ring_width = 2 * (csa ? 2 : 1) * hd;
    l.ring_off = k.swa_floats;
    k.swa_floats += rows(l.ring * l.ring_width);
    l.entry_off = k.full_floats;
    k.full_floats += rows(P / l.rate * k.slot_floats);
    if (csa) {
      l.index_ring_off = k.swa_floats;
      k.swa_floats += rows(2 * cfg.csa_rate * 4 * dI);
      l.index_off = k.full_floats;
      k.full_floats += rows(P / cfg.csa_rate * dI);
    }
  }
  if (k.full_floats == 0) k.full_floats = hd;  // all-SWA models still get addressable pages
  return k;
}

}  // namespace hart
