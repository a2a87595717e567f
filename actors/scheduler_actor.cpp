#include "actors/scheduler_actor.h"

#include "actors/cache_shard_actor.h"
#include "runtime/core/log.h"
#include "runtime/pd/decode_link.h"
#include "runtime/pd/pd_decode.h"
#include "runtime/sched/step_pipeline.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>

namespace hart::actors {
namespace {

using namespace std::chrono_literals;

// A decode step shorter than this plus half the catch window is not worth a
// timer: the spin starts at its dispatch.
constexpr double k_min_catch_delay_us = 50;

protocol::stats_reply make_stats(const sched::serving_stats& s, uint64_t weight_version, uint64_t caught,
                                 uint64_t tag, const pd::pd_decode* pd) {
  protocol::stats_reply r;
  r.tag = tag;
  r.entries = {{"queue_depth", double(s.waiting)},
               {"running", double(s.running)},
               {"steps", double(s.steps)},
               {"steps_planned_ahead", double(s.steps_ahead)},
               {"preemptions", double(s.preemptions)},
               {"finished", double(s.finished)},
               {"generated_tokens", double(s.generated_tokens)},
               {"prefill_tokens", double(s.fed_tokens)},
               {"spec_verify_passes", double(s.verify_passes)},
               {"spec_draft_tokens", double(s.drafted_tokens)},
               {"spec_accepted_tokens", double(s.accepted_drafts)},
               {"tokens_per_second", s.tokens_per_s},
               {"time_to_first_token_us_mean", s.ttft_us_mean},
               {"step_latency_us_p50", s.step_us_p50},
               {"step_latency_us_p99", s.step_us_p99},
               {"decode_step_latency_us_p50", s.decode_step_us_p50},
               {"decode_step_latency_us_p99", s.decode_step_us_p99},
               {"decode_exec_latency_us_mean", s.decode_exec_us_mean},
               {"decode_exec_latency_us_p50", s.decode_exec_us_p50},
               {"decode_exec_latency_us_p99", s.decode_exec_us_p99},
               {"decode_gap_us_mean", s.decode_gap_us_mean},
               {"decode_gap_us_p50", s.decode_gap_us_p50},
               {"decode_gap_us_p99", s.decode_gap_us_p99},
               {"decode_gap_grants_us_p50", s.decode_gap_grants_us_p50},
               {"decode_gap_grants_us_p99", s.decode_gap_grants_us_p99},
               {"decode_gap_shard_us_p50", s.decode_gap_shard_us_p50},
               {"decode_gap_shard_us_p99", s.decode_gap_shard_us_p99},
               {"decode_gap_wake_us_p50", s.decode_gap_wake_us_p50},
               {"decode_gap_wake_us_p99", s.decode_gap_wake_us_p99},
               {"decode_gap_apply_us_p50", s.decode_gap_apply_us_p50},
               {"decode_gap_apply_us_p99", s.decode_gap_apply_us_p99},
               {"decode_gap_plan_us_p50", s.decode_gap_plan_us_p50},
               {"decode_gap_plan_us_p99", s.decode_gap_plan_us_p99},
               {"decode_gap_handoff_us_p50", s.decode_gap_handoff_us_p50},
               {"decode_gap_handoff_us_p99", s.decode_gap_handoff_us_p99},
               {"decode_steps_with_shard", double(s.decode_steps_with_shard)},
               {"pages_granted_ahead", double(s.pages_granted_ahead)},
               {"decode_outcomes_caught", double(caught)},
               {"cache_hit_rate", s.cache_hit_rate},
               {"cache_full_pages_used", double(s.cache.full_pages_used)},
               {"cache_full_pages_total", double(s.cache.full_pages_total)},
               {"cache_swa_pages_used", double(s.cache.swa_pages_used)},
               {"cache_swa_pages_total", double(s.cache.swa_pages_total)},
               {"cache_evicted_full_pages", double(s.cache.evicted_full_pages)},
               {"worker_failures", double(s.worker_failures)},
               {"weight_version", double(weight_version)}};
  if (pd) {  // --role decode: the hand-offs from the prefill server
    const pd::pd_decode_counters& c = pd->counters();
    r.entries.insert(r.entries.end(), {{"pd_transfers", double(c.transfers)},
                                       {"pd_transfers_in_flight", double(pd->n_transfers())},
                                       {"pd_completed", double(c.completed)},
                                       {"pd_failed", double(c.failed)},
                                       {"pd_timed_out", double(c.timed_out)},
                                       {"pd_chunks_imported", double(c.chunks)},
                                       {"pd_full_pages_imported", double(c.full_pages_imported)},
                                       {"pd_full_pages_cached", double(c.full_pages_cached)}});
  }
  r.histograms = {{"time_to_first_token_seconds", s.ttft},
                  {"time_per_output_token_seconds", s.tpot},
                  {"e2e_request_latency_seconds", s.e2e},
                  {"step_latency_seconds", s.step}};
  std::ostringstream prom;
  for (const auto& [name, value] : r.entries) prom << "hart_" << name << ' ' << value << '\n';
  r.prometheus = prom.str();
  return r;
}

struct scheduler_state;
using scheduler_self = scheduler_actor::stateful_pointer<scheduler_state>;

/// Where the PD link's thread delivers the prefill server's messages: the
/// scheduler actor once it exists (a weak handle: the link lives in its state).
struct pd_inbox {
  std::mutex mu;
  caf::actor_addr target;

  void deliver(pd_link::pd_message m) {
    caf::actor_addr to;
    {
      std::lock_guard<std::mutex> lock(mu);
      to = target;
    }
    if (auto a = caf::actor_cast<scheduler_actor>(to))
      caf::anon_send(a, pd_atom::value, std::make_shared<const pd_link::pd_message>(std::move(m)));
  }
};

/// The decode server's hand-offs (pd_decode) reach the shard, the worker, the
/// link and the scheduler through the actor.
struct scheduler_pd_port : pd::pd_decode_port {
  scheduler_state* st = nullptr;
  void reserve(cache::prefill_reservation r) override;
  void send(const pd_link::pd_message& m) override;
  void import(std::shared_ptr<const pd::kv_import> c) override;
  void release(cache::request_id id) override;
  status admit(sched::gen_request r, const sched::prefilled& p) override;
  void publish(sched::event_batch ev) override;
  void wake_after(uint64_t transfer_id, uint64_t generation, std::chrono::milliseconds delay) override;
  int64_t now_us() override;
};

// The actor's half of the step path: messages in, the pipeline (plain C++,
// runtime/sched/step_pipeline.h) decides, its port sends. What stays here is
// what needs the actor: the catch window's spin on the mailbox, and who asked
// for a swap.
struct scheduler_state : sched::pipeline_port {
  scheduler_self self = nullptr;
  /// Shared only because spawn arguments must be copyable; used only here.
  std::shared_ptr<sched::step_pipeline> pipeline;
  scheduler_actor_params params;
  /// Token and finish events go here; control replies too.
  gateway_actor gateway;
  /// The swap waiting for the step boundary or running on the worker, and who asked.
  std::shared_ptr<const swap_request> swap;
  weight_sync_actor swap_from;
  /// Weights serving now: every event is stamped with them.
  uint64_t weight_version = 0;
  /// --role decode: the link to the prefill server (shared only because spawn
  /// arguments must be copyable) and the hand-offs in progress; null otherwise.
  std::shared_ptr<pd::decode_link> pd_link;
  std::unique_ptr<pd::pd_decode> pd;
  scheduler_pd_port pd_port;
  /// Which dispatch the pending catch timer is for, and the open window.
  uint64_t catch_gen = 0;
  uint64_t caught = 0;         // step outcomes that arrived inside an open catch window
  int64_t catch_until_us = 0;  // the open catch window's end (0: none)
  int64_t catch_late_us = 0;  // the step in flight counts as late from here: the window stays open until then

  sched::scheduler& sched() { return pipeline->sched(); }

  // -- pipeline_port -------------------------------------------------------------------
  void send_step(std::shared_ptr<const sched::step_plan> plan, int64_t sent_us) override {
    const size_t batch = plan->items.size();
    self->send(params.worker, step_atom::value, std::move(plan));
    arm_catch(sent_us, batch);
  }
  void send_swap() override { self->send(params.worker, swap_atom::value, swap); }
  void send_cache_ops(cache::cache_op_batch ops) override {
    self->send(shard(0), cache_ops_atom::value,
               std::make_shared<const cache::cache_op_batch>(std::move(ops)));
  }
  // await: nothing else is handled until the grants are applied, as when the
  // policy called the index synchronously.
  void ask_slots(cache::slot_request req) override {
    auto* st = this;
    self->request(shard(0), caf::infinite, shard_plan_atom::value,
                  std::make_shared<const cache::slot_request>(std::move(req)))
        .await([st](std::shared_ptr<const cache::slot_grants> g) { st->pipeline->on_slots(*g); },
               [st](caf::error& e) {
                 HART_LOG_ERROR("cache shard 0 did not answer: %s", caf::to_string(e).c_str());
                 st->self->quit(e);
               });
  }
  void ask_reserve(cache::reserve_request req) override {
    auto* st = this;
    self->request(shard(0), caf::infinite, shard_reserve_atom::value,
                  std::make_shared<const cache::reserve_request>(std::move(req)))
        .then([st](std::shared_ptr<const cache::reserve_grants> g) {
          st->pipeline->on_reserved(*g);
          st->resume_catch();
        });
  }
  void publish(sched::event_batch ev) override {
    if (ev.empty()) return;
    self->send(gateway, events_atom::value, std::make_shared<const sched::event_batch>(std::move(ev)),
               weight_version);
  }
  void retry_after(std::chrono::milliseconds delay) override {
    self->delayed_send(self, delay, retry_atom::value);
  }

  void reply(const transport::client_id& client, protocol::reply r) {
    self->send(gateway, reply_atom::value,
               std::make_shared<const addressed_reply>(addressed_reply{client, std::move(r)}));
  }

  /// The cache shard of an attention-DP rank. NOTE(hart): every sequence
  /// lives on rank 0 until the policy splits a step's budget across ranks.
  const cache_shard_actor& shard(size_t rank) const { return params.shards.at(rank); }

  // -- the catch window ----------------------------------------------------------------
  // NOTE(hart): the timer's own wake-up comes before the step ends, where its
  // latency costs nothing; from then the thread is awake when the outcome lands.
  void arm_catch(int64_t sent_us, size_t batch) {
    const double lead_us = double(params.catch_step.count()) / 2;
    if (lead_us <= 0 || pipeline->in_flight() != 1 || !pipeline->last_step_decode_only()) return;
    const double expected_us = pipeline->expected_exec_us(batch);
    const double delay_us = expected_us - lead_us;
    catch_late_us = sent_us + int64_t(2 * expected_us);
    if (delay_us < k_min_catch_delay_us) {
      self->send(self, catch_atom::value, ++catch_gen);
    } else {
      self->delayed_send(self, std::chrono::microseconds(int64_t(delay_us)), catch_atom::value, ++catch_gen);
    }
  }

  /// Opens the catch window (the first time for this step: N µs, and for a
  /// late step until twice its expected time) and spins until any message
  /// arrives or the window ends.
  void on_catch(uint64_t gen) {
    if (gen != catch_gen || pipeline->in_flight() == 0) return;
    if (catch_until_us == 0)
      catch_until_us = std::max(sched().now_us() + params.catch_step.count(), catch_late_us);
    while (self->mailbox().empty() && sched().now_us() < catch_until_us) {
    }
  }

  /// After a message other than the outcome cut the spin short (a submit, the
  /// shard's pages ahead): spin on for the rest of the window. Measured: the
  /// gap's tail was in its wake phase (perf-notes S1 v13).
  void resume_catch() {
    if (catch_until_us > 0 && pipeline->in_flight() == 1 && sched().now_us() < catch_until_us) {
      self->send(self, catch_atom::value, catch_gen);
    }
  }

  // -- messages ------------------------------------------------------------------------
  void on_step_done(const step_outcome& o) {
    if (pipeline->in_flight() == 0) return;
    const int64_t arrived_us = sched().now_us();
    ++catch_gen;  // the pending catch timer, if any, is for this step
    caught += catch_until_us > 0 && arrived_us <= catch_until_us;
    catch_until_us = 0;
    pipeline->on_step_done(o, arrived_us);
  }

  void on_control(const control_call& c) {
    using protocol::control_verb;
    const protocol::control_request& ctl = c.control;
    switch (ctl.verb) {
      // The ack first, then the aborted samples' finals (protocol §4.2).
      case control_verb::abort: {
        sched::event_batch ev;
        for (uint64_t id : c.ids) ev.append(sched().abort(id));
        if (c.ack) reply(c.client, protocol::ack_reply{ctl.tag, ctl.verb, uint32_t(c.ids.size())});
        publish(std::move(ev));
        if (pd)
          for (uint64_t id : c.ids) pd->abort(id);  // those still being handed off
        break;
      }
      case control_verb::pause: {
        const sched::pause_mode m = ctl.mode == protocol::pause_mode::abort     ? sched::pause_mode::abort
                                    : ctl.mode == protocol::pause_mode::retract ? sched::pause_mode::retract
                                                                                : sched::pause_mode::in_place;
        const int64_t running = sched().n_running();
        sched::event_batch ev = sched().pause(m);
        // affected: the generations aborted (abort), or the sequences retracted / frozen.
        std::set<uint64_t> aborted;
        for (const sched::finish_event& f : ev.finishes) aborted.insert(f.request_id);
        const int64_t affected = m == sched::pause_mode::abort ? int64_t(aborted.size()) : running;
        reply(c.client, protocol::ack_reply{ctl.tag, ctl.verb, uint32_t(affected)});
        publish(std::move(ev));
        if (pd && m == sched::pause_mode::abort) pd->abort_all();
        break;
      }
      case control_verb::resume:
        sched().resume();
        reply(c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
        break;
      case control_verb::flush_cache:
        sched().flush_cache();
        reply(c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
        break;
      case control_verb::health: {
        const auto uptime_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - params.started)
                                   .count();
        reply(c.client, protocol::health_reply{ctl.tag, true, uint64_t(uptime_us)});
        break;
      }
      case control_verb::stats: {
        pipeline->sync_shard();
        const transport::client_id client = c.client;
        const uint64_t tag = ctl.tag;
        auto* st = this;
        self->request(shard(0), caf::infinite, shard_metrics_atom::value)
            .then([st, client, tag](std::shared_ptr<const cache::cache_metrics> m) {
              st->reply(client, make_stats(st->pipeline->stats(*m), st->weight_version, st->caught, tag,
                                           st->pd.get()));
            });
        break;
      }
      case control_verb::weight_version:
        reply(c.client, protocol::weight_version_reply{ctl.tag, weight_version});
        break;
    }
    pipeline->advance();
  }

  void on_swap_request(std::shared_ptr<const swap_request> r) {
    const weight_sync_actor from = caf::actor_cast<weight_sync_actor>(self->current_sender());
    if (swap) {
      swap_outcome busy{failed_precondition("weight swap: another swap is in progress"), weight_version};
      self->send(from, swapped_atom::value, std::make_shared<const swap_outcome>(std::move(busy)));
      return;
    }
    swap = std::move(r);
    swap_from = from;
    (void)pipeline->request_swap(swap->relabel());  // none pending: `swap` was empty
  }

  void on_swapped(std::shared_ptr<const swap_outcome> o) {
    const bool ok = o->result.ok();
    weight_version = o->serving_version;
    self->send(swap_from, swapped_atom::value, std::move(o));
    swap_from = weight_sync_actor{};
    swap.reset();
    pipeline->on_swapped(ok);
  }
};

void scheduler_pd_port::reserve(cache::prefill_reservation r) {
  auto* s = st;
  s->self
      ->request(s->shard(0), caf::infinite, shard_prefill_atom::value,
                std::make_shared<const cache::prefill_reservation>(std::move(r)))
      .then([s](std::shared_ptr<const cache::prefill_reserved> g) { s->pd->on_reserved(*g); });
}
void scheduler_pd_port::send(const pd_link::pd_message& m) {
  if (status e = st->pd_link->send(m); !e.ok()) HART_LOG_ERROR("pd link: %s", e.to_string().c_str());
}
void scheduler_pd_port::import(std::shared_ptr<const pd::kv_import> c) {
  st->self->send(st->params.worker, kv_import_atom::value, std::move(c));
}
void scheduler_pd_port::release(cache::request_id id) {
  st->self->send(st->shard(0), cache_ops_atom::value,
                 std::make_shared<const cache::cache_op_batch>(
                     cache::cache_op_batch{{cache::cache_op::kind::abort, id, 0, {}}}));
}
status scheduler_pd_port::admit(sched::gen_request r, const sched::prefilled& p) {
  HART_ASSIGN_OR_RETURN(sched::event_batch ev, st->sched().admit_prefilled(std::move(r), p));
  st->publish(std::move(ev));
  st->pipeline->advance();
  return {};
}
void scheduler_pd_port::publish(sched::event_batch ev) {
  st->publish(std::move(ev));
}
void scheduler_pd_port::wake_after(uint64_t transfer_id, uint64_t generation,
                                   std::chrono::milliseconds delay) {
  st->self->delayed_send(st->self, delay, pd_timeout_atom::value, transfer_id, generation);
}
int64_t scheduler_pd_port::now_us() {
  return st->sched().now_us();
}

scheduler_actor::behavior_type scheduler_impl(scheduler_self self,
                                              std::shared_ptr<sched::step_pipeline> pipeline,
                                              scheduler_actor_params params,
                                              std::shared_ptr<pd::decode_link> link) {
  auto& st = self->state;
  st.self = self;
  st.params = std::move(params);
  st.weight_version = st.params.weight_version;
  st.pipeline = std::move(pipeline);
  st.pipeline->attach(&st);
  for (const cache_shard_actor& s : st.params.shards) self->link_to(s);  // they end together
  st.pd_link = std::move(link);
  if (st.pd_link) {
    const sched::serving_params& sp = st.params.serving;
    pd::pd_decode_params pp;
    pp.endpoint = st.params.prefill_endpoint;
    pp.layout = st.params.kv_layout;
    pp.page_size = sp.cache.page_size;
    pp.window = sp.cache.window;
    pp.timeout_ms = st.params.prefill_timeout_ms;
    pp.vocab_size = sp.sched.vocab_size;
    pp.max_context = sp.sched.max_context;
    st.pd_port.st = &st;
    st.pd = std::make_unique<pd::pd_decode>(pp, &st.pd_port);
  }
  return {
      [=](gateway_actor gw) { self->state.gateway = std::move(gw); },
      [=](submit_atom, std::shared_ptr<const submit_request> r) {
        if (self->state.pd) {
          self->state.pd->submit(r->request);
        } else {
          self->state.pipeline->submit(r->request);
        }
        self->state.resume_catch();
      },
      [=](pd_atom, std::shared_ptr<const pd_link::pd_message> m) {
        if (self->state.pd) self->state.pd->on_message(*m);
      },
      [=](kv_imported_atom, uint64_t transfer, std::shared_ptr<const status> result) {
        if (self->state.pd) self->state.pd->on_imported(transfer, *result);
      },
      [=](pd_timeout_atom, uint64_t transfer, uint64_t generation) {
        if (self->state.pd) self->state.pd->on_timeout(transfer, generation);
      },
      [=](control_atom, std::shared_ptr<const control_call> c) {
        self->state.on_control(*c);
        self->state.resume_catch();
      },
      [=](swap_atom, std::shared_ptr<const swap_request> r) { self->state.on_swap_request(std::move(r)); },
      [=](swapped_atom, std::shared_ptr<const swap_outcome> o) { self->state.on_swapped(std::move(o)); },
      [=](step_done_atom, std::shared_ptr<const step_outcome> o) { self->state.on_step_done(*o); },
      [=](retry_atom) { self->state.pipeline->on_retry(); },
      [=](catch_atom, uint64_t gen) { self->state.on_catch(gen); },
  };
}

}  // namespace

status_or<scheduler_actor> spawn_scheduler_actor(caf::actor_system& sys,
                                                 const scheduler_actor_params& given) {
  if (given.shards.size() > 1) {
    return unimplemented("scheduler: %zu cache shards; a step is planned for one attention-DP rank",
                         given.shards.size());
  }
  HART_ASSIGN_OR_RETURN(std::unique_ptr<sched::scheduler> sched,
                        sched::scheduler::create(given.serving, given.tok));
  scheduler_actor_params params = given;
  if (params.shards.empty()) {
    HART_ASSIGN_OR_RETURN(cache_shard_actor shard, spawn_cache_shard_actor(sys, params.serving.cache, 0));
    params.shards.push_back(std::move(shard));
  }
  // NOTE(hart): detached although it never blocks: its own thread wakes on a
  // condition variable the moment a step outcome arrives, whatever the pool is
  // busy with (gateway, weight sync); the step path is the S1 budget.
  auto pipeline =
      std::make_shared<sched::step_pipeline>(std::move(sched), sched::step_pipeline_params{params.overlap});
  std::shared_ptr<pd::decode_link> link;
  auto inbox = std::make_shared<pd_inbox>();
  if (!params.prefill_endpoint.empty()) {
    const std::string ep = params.prefill_endpoint;
    HART_ASSIGN_OR_RETURN(std::unique_ptr<pd::decode_link> l,
                          pd::decode_link::connect(
                              ep, [inbox](pd_link::pd_message m) { inbox->deliver(std::move(m)); },
                              [ep](const status& why) {
                                HART_LOG_WARN("pd link %s: a message it cannot read: %s", ep.c_str(),
                                              why.to_string().c_str());
                              }));
    link = std::move(l);
  }
  scheduler_actor a = sys.spawn<caf::detached>(scheduler_impl, std::move(pipeline), params, std::move(link));
  {
    std::lock_guard<std::mutex> lock(inbox->mu);
    inbox->target = a.address();
  }
  return a;
}

}  // namespace hart::actors
