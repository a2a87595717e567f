#include "runtime/worker/engine_executor.h"

#include "runtime/worker/mtp_drafting.h"
#include "runtime/worker/step_routing.h"
#include "runtime/worker/step_sampling.h"

#include <algorithm>

namespace hart::worker {

status_or<std::unique_ptr<engine_executor>> engine_executor::on_cpu(const engine& eng,
                                                                    const cache::cache_config& cache) {
  std::unique_ptr<engine_executor> ex(new engine_executor());
  HART_ASSIGN_OR_RETURN(ex->store_, eng.make_store(cache.page_size));
  ex->store_->ensure_full_pages(cache.n_full_pages);
  ex->store_->ensure_swa_pages(cache.n_swa_pages);
  ex->eng_ = forward_engine_cpu_view(eng);
  kv_store* store = ex->store_.get();
  ex->bind_ = [&eng, store](const sched::step_item& it) {
    sequence_state seq = eng.new_sequence();
    engine::bind_pages(seq, store, it.full_pages, it.swa_pages, it.n_computed);
    return seq;
  };
  return ex;
}

std::unique_ptr<engine_executor> engine_executor::over(std::shared_ptr<const forward_engine> eng,
                                                       page_binder bind) {
  std::unique_ptr<engine_executor> ex(new engine_executor());
  ex->eng_ = std::move(eng);
  ex->bind_ = std::move(bind);
  return ex;
}

namespace {

// A verify item's shape: the next token then its drafts, sampled, no prompt log-probs; at most the
// engine's pass limit (checked by the engine).
status check_verify_item(const sched::step_item& it) {
  if (int64_t(it.tokens.size()) != it.n_drafts() + 1 || !it.sample_last || it.prompt_logprobs ||
      it.feed_last_sampled)
    return invalid_argument(
        "step item of sequence %llu: a verify pass is the next token and its %lld drafts, "
        "sampled, without prompt log-probs (got %zu tokens)",
        (unsigned long long)it.seq_id, (long long)it.n_drafts(), it.tokens.size());
  return {};
}

}  // namespace

status_or<sched::step_result> engine_executor::execute(const sched::step_plan& plan) {
  sched::step_result res;
  res.step = plan.step;
  if (plan.empty()) return res;
  std::vector<sequence_state> seqs(plan.items.size());
  std::vector<batch_item> batch(plan.items.size());
  std::vector<ring_snapshot> snaps;
  std::vector<ring_snapshot*> keep;  // one per item when the step verifies drafts
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const sched::step_item& it = plan.items[i];
    if (it.n_drafts() > 0) {
      if (res.error = check_verify_item(it); !res.error.ok()) return res;
      if (!eng_->can_verify()) {
        res.error = unimplemented(
            "step item of sequence %llu drafts tokens, and this engine has no "
            "speculative verify pass",
            (unsigned long long)it.seq_id);
        return res;
      }
      if (snaps.empty()) snaps.resize(plan.items.size());
      keep.resize(plan.items.size(), nullptr);
      keep[i] = &snaps[i];
    }
    seqs[i] = bind_(it);
    batch[i].seq = &seqs[i];
    batch[i].tokens = it.tokens;
    batch[i].logits = step_item_logits(it);
  }
  forward_trace trace;
  const bool capture = plan_captures_routing(plan);
  trace.capture_last_streams =
      std::any_of(plan.items.begin(), plan.items.end(), [](const sched::step_item& it) { return it.mtp_kv; });
  forward_trace* tr = capture || trace.capture_last_streams ? &trace : nullptr;
  res.error = keep.empty() ? eng_->forward(batch, &logits_, tr) : eng_->verify(batch, keep, &logits_, tr);
  if (!res.error.ok()) return res;
  if (capture) collect_step_routing(plan, trace, &res);
  const std::vector<int64_t> emitted =
      sample_step_items(plan, logits_.data(), eng_->config().vocab_size, &res);
  // Each verify pass keeps the positions of its last token and the kept drafts; the rest is taken back.
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    const sched::step_item& it = plan.items[i];
    if (res.error = eng_->rollback(seqs[i], it.n_computed + emitted[i], *keep[i]); !res.error.ok()) {
      res.sampled.clear();
      return res;
    }
  }
  if (trace.capture_last_streams) {
    if (res.error = mtp_catch_up(*eng_, plan, seqs, trace.last_streams, emitted, &res); !res.error.ok()) {
      res.sampled.clear();
      res.drafts.clear();
    }
  }
  return res;
}

}  // namespace hart::worker
