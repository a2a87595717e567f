// File: runtime/model/forward_engine.h
// What a worker needs from an engine, whatever runs it: the model's config,
// fresh sequences, forward(batch, logits, trace) with the contract of
// engine::forward (runtime/model/engine.h), and where the engine has them the
// speculative verify pass and its rollback (engine::verify / rollback). The CPU engine is wrapped by
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

  /// Speculative verification (docs/spec-decode.md §4): engine::verify and
  /// engine::rollback's contract. An engine that cannot take a pass back
  /// (the GPU engine, until its ring snapshot is built) says so here and
  /// refuses both, so a snapshot request is never silently ignored.
  virtual bool can_verify() const { return false; }
  virtual status verify(const std::vector<batch_item>& batch, const std::vector<ring_snapshot*>& keep_rings,
                        std::vector<float>* logits, forward_trace* trace = nullptr) const {
    (void)batch, (void)keep_rings, (void)logits, (void)trace;
    return unimplemented("this engine has no speculative verify pass");
  }
  virtual status rollback(sequence_state& seq, int64_t n_keep, const ring_snapshot& snap) const {
    (void)seq, (void)n_keep, (void)snap;
    return unimplemented("this engine has no speculative verify pass");
  }
  /// The MTP block for drafting (engine::mtp_forward's contract); 0 blocks
  /// where the checkpoint has none or the engine cannot run it.
  virtual int64_t n_mtp_blocks() const { return 0; }
  virtual status mtp_forward(sequence_state& seq, int64_t p0, const std::vector<int32_t>& next,
                             const std::vector<float>& streams, std::vector<float>* logits,
                             std::vector<float>* out_streams) const {
    (void)seq, (void)p0, (void)next, (void)streams, (void)logits, (void)out_streams;
    return unimplemented("this engine does not run the MTP block");
  }
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
  bool can_verify() const override { return true; }
  status verify(const std::vector<batch_item>& batch, const std::vector<ring_snapshot*>& keep_rings,
                std::vector<float>* logits, forward_trace* trace = nullptr) const override {
    return e_->verify(batch, keep_rings, logits, trace);
  }
  status rollback(sequence_state& seq, int64_t n_keep, const ring_snapshot& snap) const override {
    return e_->rollback(seq, n_keep, snap);
  }
  int64_t n_mtp_blocks() const override { return e_->n_mtp_blocks(); }
  status mtp_forward(sequence_state& seq, int64_t p0, const std::vector<int32_t>& next,
                     const std::vector<float>& streams, std::vector<float>* logits,
                     std::vector<float>* out_streams) const override {
    return e_->mtp_forward(seq, p0, next, streams, logits, out_streams);
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
