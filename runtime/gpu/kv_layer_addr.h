// File: runtime/gpu/kv_layer_addr.h
// One layer's addresses inside the KV pool (kv_pool.h), as float offsets from
// the pool's base: the arithmetic the host's metadata builders and the
// device's (decode_meta.cu) share, so both place every row identically.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define HART_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HART_HOST_DEVICE inline
#endif

namespace hart::gpu {

struct kv_layer_addr {
  // The pool's geometry (the same for every layer).
  int64_t page_size = 0, hd = 0, dI = 0, csa_rate = 4;
  int64_t full_floats = 0, swa_floats = 0, swa0 = 0;  // per full / SWA page; SWA pages start at swa0
  // Window KV and main entries: fp32 rows of hd (the attention indexes them by
  // pool row), or 584-byte FP8 entries packed 146 floats apart (kv_entry.h;
  // the attention indexes window slots and entry slots in two pools).
  int64_t slot_floats = 0;
  bool entries = false;
  // This layer's sections: rate, ring rows and width; offsets inside an SWA / full page.
  int64_t rate = 0, ring = 0, ring_width = 0;
  int64_t window_off = 0, ring_off = 0, index_ring_off = 0;
  int64_t entry_off = 0, index_off = 0;

  // `off` is p % page_size, `pos` the absolute position.
  HART_HOST_DEVICE int64_t window(int32_t swa_page, int64_t off) const {
    return swa0 + swa_page * swa_floats + window_off + off * slot_floats;
  }
  HART_HOST_DEVICE int64_t entry(int32_t full_page, int64_t off) const {
    return full_page * full_floats + entry_off + off / rate * slot_floats;
  }
  // What an attention index list holds for a window position / an entry: the
  // pool row (fp32 rows), or the slot in the layer's window / entry pool
  // (FP8 entries: page p's slots are p · per-page + i).
  HART_HOST_DEVICE int32_t window_index(int32_t swa_page, int64_t off) const {
    return entries ? int32_t(swa_page * page_size + off) : int32_t(window(swa_page, off) / hd);
  }
  HART_HOST_DEVICE int32_t entry_index(int32_t full_page, int64_t off) const {
    return entries ? int32_t(full_page * (page_size / rate) + off / rate)
                   : int32_t(entry(full_page, off) / hd);
  }
  HART_HOST_DEVICE int64_t index_key(int32_t full_page, int64_t off) const {
    return full_page * full_floats + index_off + off / csa_rate * dI;
  }
  HART_HOST_DEVICE int64_t ring_row(int32_t swa_page, int64_t pos) const {
    return swa0 + swa_page * swa_floats + ring_off + pos % ring * ring_width;
  }
  HART_HOST_DEVICE int64_t index_ring(int32_t swa_page, int64_t pos) const {
    return swa0 + swa_page * swa_floats + index_ring_off + pos % (2 * csa_rate) * 4 * dI;
  }
};

}  // namespace hart::gpu
