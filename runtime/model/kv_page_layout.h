// File: runtime/model/kv_page_layout.h
// The GPU engine's KV page layout as plain arithmetic: where each layer's
// sections sit inside one full page and one SWA page (runtime/gpu/kv_pool.h
// has the pool; this is its geometry), so `hart cache-plan` sizes the device
// pool exactly without CUDA. Offsets and sizes are in floats; every section
// starts on a row of head_dim floats.
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <vector>

namespace hart {

struct kv_layer_sections {
  int64_t rate = 0, ring = 0, ring_width = 0;  // compress rate; ring rows and their width (0 for SWA layers)
  int64_t window_off = 0, ring_off = 0, index_ring_off = 0;  // inside an SWA page
  int64_t entry_off = 0, index_off = 0;                      // inside a full page
};

struct kv_page_layout {
  std::vector<kv_layer_sections> layers;
  int64_t full_floats = 0, swa_floats = 0;  // per page
  int64_t slot_floats = 0;  // one window / entry slot: head_dim fp32, or a 584-byte FP8 entry (146 floats)

  int64_t full_page_bytes() const { return full_floats * int64_t(sizeof(float)); }
  int64_t swa_page_bytes() const { return swa_floats * int64_t(sizeof(float)); }
};

/// `cfg`'s pages of `page_size` tokens; `entries`: window KV and compressed
/// entries as FP8 entries (head_dim must be 512, else invalid_argument).
status_or<kv_page_layout> kv_page_layout_make(const model_config& cfg, int64_t page_size, bool entries);

}  // namespace hart
