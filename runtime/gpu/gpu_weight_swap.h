// File: runtime/gpu/gpu_weight_swap.h
// Weight updates of the GPU engine, as the CPU engine's (engine.h
// build_weights / swap_weights): gpu_engine::build_weights reads the new
// tensors one linear at a time, uploads them into a second set of device
// buffers and, in fp8 precision, re-quantizes them on the device
// (weight_requant.h; device_weights_build); the
// result is what a fresh load of the same tensors holds, bit for bit.
// gpu_engine::swap_weights then replaces the serving set between forward calls
// and frees the old one. A failed build changes nothing.
//
//   HART_ASSIGN_OR_RETURN(auto w, eng->build_weights(update));   // may overlap forward()
//   HART_RETURN_IF_ERROR(eng->swap_weights(std::move(w), 7));    // between forward() calls
#pragma once

#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_weights.h"

#include <cstdint>

namespace hart {

/// Device weights built for one engine, not serving yet.
struct gpu_built_weights {
  uint64_t engine_id = 0;  ///< the engine that built them; only it may swap them in
  gpu::device_weights w;
};

}  // namespace hart
