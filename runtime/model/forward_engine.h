// File: runtime/model/forward_engine.h
// What a worker needs from an engine, whatever runs it: the model's config,
// fresh sequences, and forward(batch, logits, trace) with the contract of
// engine::forward (runtime/model/engine.h). The CPU engine is wrapped by
// forward_engine_cpu (owning) or forward_engine_cpu_view (borrowed); the GPU
// engine (runtime/gpu/gpu_engine.h) implements it.
//
//   std::unique_ptr<forward_engine> e = forward_engine_cpu(std::move(cpu_engine));
//   sequence_state s = e->new_sequence();
//   HART_RETURN_IF_ERROR(e->forward({{&s, prompt, logits_request::last}}, &logits));
#pragma once

#include "runtime/model/engine.h"

#include <memory>
#include <vector>

namespace hart {

class forward_engine {
 public:
  virtual ~forward_engine() = default;
  virtual const model_config& config() const = 0;
  /// A sequence whose pages come from this engine (it must not outlive it).
  virtual sequence_state new_sequence() const = 0;
  /// engine::forward's contract: logits [vocab, rows] in item order; invalid
  /// input is an error that changes no state. One call at a time.
  virtual status forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                         forward_trace* trace = nullptr) const = 0;
};

/// The CPU engine behind the interface.
class forward_engine_cpu_impl final : public forward_engine {
 public:
  explicit forward_engine_cpu_impl(std::shared_ptr<const engine> e) : e_(std::move(e)) {}
  const model_config& config() const override { return e_->config(); }
  sequence_state new_sequence() const override { return e_->new_sequence(); }
  status forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                 forward_trace* trace = nullptr) const override {
    return e_->forward(batch, logits, trace);
  }
  const engine& cpu() const { return *e_; }

 private:
  std::shared_ptr<const engine> e_;
};

inline std::unique_ptr<forward_engine> forward_engine_cpu(std::unique_ptr<engine> e) {
  return std::make_unique<forward_engine_cpu_impl>(std::move(e));
}

/// The CPU engine behind the interface, borrowed: `e` must outlive the result.
inline std::unique_ptr<forward_engine> forward_engine_cpu_view(const engine& e) {
  return std::make_unique<forward_engine_cpu_impl>(std::shared_ptr<const engine>(&e, [](const engine*) {}));
}

}  // namespace hart
