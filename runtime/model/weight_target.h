// File: runtime/model/weight_target.h
// What a weight update needs from the engine that serves, whichever it is:
// build new weights from a tensor_source off the serving path (thread-safe,
// may overlap forward calls), swap them in between two forward calls, and
// the version serving. The weight-sync actor builds through it and the worker
// actor swaps through it, so neither knows the CPU engine from the GPU one
// (the GPU's: worker::gpu_weight_target, runtime/worker/gpu_executor.h).
//
//   std::shared_ptr<weight_target> t = engine_weight_target(eng);
//   HART_ASSIGN_OR_RETURN(auto w, t->build(src));       // any thread
//   HART_RETURN_IF_ERROR(t->swap(std::move(w), 7));      // between forward calls
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/engine.h"
#include "runtime/model/tensor_source.h"

#include <cstdint>
#include <memory>

namespace hart {

/// Weights one target built and only it can swap in (opaque to everyone else).
/// A swap consumes them (device buffers move into the engine), so they are swapped at most once.
class built_weights {
 public:
  virtual ~built_weights() = default;
};

class weight_target {
 public:
  virtual ~weight_target() = default;
  /// Validates and builds `src` as a load would (the engine's build_weights errors); thread-safe.
  virtual status_or<std::shared_ptr<built_weights>> build(const tensor_source& src) const = 0;
  /// Replaces the serving weights with `w` as `version` (the engine's swap_weights errors;
  /// invalid_argument for weights another target built, failed_precondition for weights
  /// already swapped). Not concurrent with forward: the caller swaps between steps.
  virtual status swap(std::shared_ptr<built_weights> w, uint64_t version) = 0;
  /// Names the serving weights `version`, unchanged (the engine's relabel_weights errors); when
  /// a swap would happen.
  virtual status relabel(uint64_t version) = 0;
  /// 0 for the weights loaded from the checkpoint.
  virtual uint64_t version() const = 0;
};

namespace detail {

struct cpu_built_weights final : built_weights {
  std::shared_ptr<const model_weights> w;
  const engine* owner = nullptr;
};

class engine_weight_target final : public weight_target {
 public:
  explicit engine_weight_target(engine& eng) : eng_(eng) {}
  status_or<std::shared_ptr<built_weights>> build(const tensor_source& src) const override {
    HART_ASSIGN_OR_RETURN(auto w, eng_.build_weights(src));
    auto b = std::make_shared<cpu_built_weights>();
    b->w = std::move(w);
    b->owner = &eng_;
    return std::shared_ptr<built_weights>(std::move(b));
  }
  status swap(std::shared_ptr<built_weights> w, uint64_t version) override {
    auto* b = dynamic_cast<cpu_built_weights*>(w.get());
    if (!b || b->owner != &eng_)
      return invalid_argument("weight swap: the weights were built for another engine");
    return eng_.swap_weights(b->w, version);
  }
  status relabel(uint64_t version) override { return eng_.relabel_weights(version); }
  uint64_t version() const override { return eng_.weight_version(); }

 private:
  engine& eng_;
};

}  // namespace detail

/// The CPU engine as a weight target; `eng` must outlive it. Swaps exactly as
/// engine::swap_weights (the same weights object serves).
inline std::shared_ptr<weight_target> engine_weight_target(engine& eng) {
  return std::make_shared<detail::engine_weight_target>(eng);
}

}  // namespace hart
