#include "actors/scheduler_actor.h"

#include <algorithm>
#include <deque>
#include <set>
#include <sstream>
#include <unordered_map>

#include "actors/cache_shard_actor.h"
#include "runtime/core/log.h"

namespace hart::actors {
namespace {

using namespace std::chrono_literals;

// A decode step shorter than this plus half the catch window is not worth a
// timer: the spin starts at its dispatch.
constexpr double k_min_catch_delay_us = 50;

protocol::stats_reply make_stats(const sched::serving_stats& s, uint64_t weight_version, uint64_t caught, uint64_t tag) {
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

struct scheduler_state {
  /// Requests and batching policy; mutated only here (shared only because
  /// spawn arguments must be copyable). Its cache shard is shards[0].
  std::shared_ptr<sched::serving_core> core;
  scheduler_actor_params params;
  /// Events of the step just applied, sent to the gateway once the next plan
  /// is on its way to the worker (or it is clear there is none yet).
  sched::event_batch step_events;
  /// Token and finish events go here; control replies too.
  gateway_actor gateway;
  /// The plans sent to the worker and not answered yet, oldest first (two
  /// while a step is planned ahead: --overlap-schedule), and when each was planned.
  std::deque<std::pair<std::shared_ptr<const sched::step_plan>, sched::step_timing>> in_flight;
  /// A swap waiting for the step boundary, and who asked; `swapping` while the worker swaps.
  std::shared_ptr<const swap_request> swap;
  weight_sync_actor swap_from;
  bool swapping = false;
  /// Weights serving now: every event is stamped with them.
  uint64_t weight_version = 0;
  /// A retry is scheduled (a plan came back empty while requests wait for memory).
  bool retry_pending = false;
  /// Decode steps' execution time, smoothed over all of them and per batch
  /// size (a batch that lost or gained a sequence runs shorter or longer),
  /// and which dispatch the pending catch timer is for.
  double decode_exec_us = 0;
  std::unordered_map<size_t, double> decode_exec_us_by_batch;
  uint64_t catch_gen = 0;
  uint64_t caught = 0;  // step outcomes that arrived inside an open catch window
  int64_t catch_until_us = 0;  // the open catch window's end (0: none)
  int64_t catch_late_us = 0;   // the step in flight counts as late from here: the window stays open until then

  double expected_exec_us(size_t batch) const {
    const auto it = decode_exec_us_by_batch.find(batch);
    return it != decode_exec_us_by_batch.end() ? it->second : decode_exec_us;
  }

  void publish(scheduler_self self, sched::event_batch ev) {
    if (ev.empty()) return;
    self->send(gateway, events_atom::value, std::make_shared<const sched::event_batch>(std::move(ev)), weight_version);
  }

  void reply(scheduler_self self, const transport::client_id& client, protocol::reply r) {
    self->send(gateway, reply_atom::value, std::make_shared<const addressed_reply>(addressed_reply{client, std::move(r)}));
  }

  /// The cache shard of an attention-DP rank. NOTE(hart): every sequence
  /// lives on rank 0 until the policy splits a step's budget across ranks.
  const cache_shard_actor& shard(size_t rank) const { return params.shards.at(rank); }

  /// Sends the cache changes made so far to the shard; before any request
  /// that must see them (the shard handles a sender's messages in order).
  void send_cache_ops(scheduler_self self) {
    cache::cache_op_batch ops = core->take_cache_ops();
    if (!ops.empty()) self->send(shard(0), cache_ops_atom::value, std::make_shared<const cache::cache_op_batch>(std::move(ops)));
  }

  /// Once a plan is on its way to the worker (or none is due): the cache ops
  /// made so far, then a request for the pages that decoding sequences cross
  /// into within a few steps. Its answer is applied whenever it comes, between
  /// steps, so the step that crosses is planned within grants; when memory is
  /// short there is none for a sequence, and that step asks the shard as before.
  void after_plan(scheduler_self self) {
    send_cache_ops(self);
    cache::reserve_request ahead = core->reserve_ahead();
    if (ahead.empty()) return;
    self->request(shard(0), caf::infinite, shard_reserve_atom::value,
                  std::make_shared<const cache::reserve_request>(std::move(ahead)))
        .then([=](std::shared_ptr<const cache::reserve_grants> g) {
          core->apply_reserved(*g);
          resume_catch(self);
        });
  }

  /// Starts the next thing the worker should do, if it is free: a pending
  /// swap first, else the next step; then talks to the shard (after_plan).
  /// `chained_from_us`: the end of the step whose outcome was just applied
  /// (0 if none) and `outcome_us` when it arrived, to measure the gap.
  void advance(scheduler_self self, int64_t chained_from_us = 0, int64_t outcome_us = 0) {
    start_next(self, chained_from_us, outcome_us);
    // NOTE(hart): after the plan went to the worker, not before: waking the
    // shard's thread on the step path cost ~100 µs of gap on 2 cores (S1).
    after_plan(self);
  }

  void start_next(scheduler_self self, int64_t chained_from_us, int64_t outcome_us) {
    if (!in_flight.empty() || swapping) return;
    if (swap) {
      swapping = true;
      self->send(params.worker, swap_atom::value, swap);
      return;
    }
    if (core->idle() || core->paused()) return;
    sched::step_timing t;
    t.planned_us = core->now_us();
    t.chained_from_us = chained_from_us;
    t.outcome_us = outcome_us;
    std::optional<cache::slot_request> req = core->plan_begin();
    if (!req) {  // within the grants the sequences hold: no shard round trip
      start_step(self, t, core->plan_end(nullptr));
      return;
    }
    send_cache_ops(self);  // the shard must see them before the request
    // await: nothing else is handled until the grants are applied, as when the
    // policy called the index synchronously.
    self->request(shard(0), caf::infinite, shard_plan_atom::value,
                  std::make_shared<const cache::slot_request>(std::move(*req)))
        .await([=](std::shared_ptr<const cache::slot_grants> g) {
                 start_step(self, t, core->plan_end(g.get()));
                 after_plan(self);
               },
               [=](caf::error& e) {
                 HART_LOG_ERROR("cache shard 0 did not answer: %s", caf::to_string(e).c_str());
                 self->quit(e);
               });
  }

  /// Sends a planned step to the worker (and, with overlap, the one after
  /// it planned ahead), then the events waiting for them.
  void start_step(scheduler_self self, const sched::step_timing& t, sched::step_plan planned) {
    auto plan = std::make_shared<sched::step_plan>(std::move(planned));
    if (!plan->empty()) {
      send_step(self, t, plan);
      plan_ahead(self);
    }
    publish(self, std::move(step_events));
    step_events = {};
    publish(self, core->take_events());
    if (plan->empty()) {
      // Everything waits on memory held by nothing that will free it soon: look again shortly.
      if (!core->idle() && !core->paused() && !retry_pending) {
        retry_pending = true;
        self->delayed_send(self, 5ms, retry_atom::value);
      }
    }
  }

  void send_step(scheduler_self self, sched::step_timing t, std::shared_ptr<const sched::step_plan> plan) {
    t.sent_us = core->now_us();
    in_flight.emplace_back(plan, t);
    const size_t batch = plan->items.size();
    self->send(params.worker, step_atom::value, std::move(plan));
    arm_catch(self, t.sent_us, batch);
  }

  // NOTE(hart): the timer's own wake-up comes before the step ends, where its
  // latency costs nothing; from then the thread is awake when the outcome lands.
  void arm_catch(scheduler_self self, int64_t sent_us, size_t batch) {
    const double lead_us = double(params.catch_step.count()) / 2;
    if (lead_us <= 0 || in_flight.size() != 1 || !core->last_step_decode_only()) return;
    const double expected_us = expected_exec_us(batch);
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
  void on_catch(scheduler_self self, uint64_t gen) {
    if (gen != catch_gen || in_flight.empty()) return;
    if (catch_until_us == 0) catch_until_us = std::max(core->now_us() + params.catch_step.count(), catch_late_us);
    while (self->mailbox().empty() && core->now_us() < catch_until_us) {
    }
  }

  /// After a message other than the outcome cut the spin short (a submit, the
  /// shard's pages ahead): spin on for the rest of the window. Measured: the
  /// gap's tail was in its wake phase (perf-notes S1 v13).
  void resume_catch(scheduler_self self) {
    if (catch_until_us > 0 && in_flight.size() == 1 && core->now_us() < catch_until_us) {
      self->send(self, catch_atom::value, catch_gen);
    }
  }

  /// With --overlap-schedule and one step in flight: the step after it, so
  /// the worker starts it as soon as it is done (scheduler::schedule_ahead).
  void plan_ahead(scheduler_self self) {
    if (!params.overlap || in_flight.size() != 1 || swap || swapping) return;
    sched::step_timing t;
    t.planned_us = core->now_us();
    sched::step_plan next = core->plan_ahead();
    if (!next.empty()) send_step(self, t, std::make_shared<const sched::step_plan>(std::move(next)));
  }

  void on_step_done(scheduler_self self, const step_outcome& o) {
    if (in_flight.empty()) return;
    const int64_t arrived_us = core->now_us();
    auto [plan, timing] = std::move(in_flight.front());
    in_flight.pop_front();
    timing.exec_start_us = o.exec_start_us;
    timing.exec_end_us = o.exec_end_us;
    ++catch_gen;  // the pending catch timer, if any, is for this step
    caught += catch_until_us > 0 && arrived_us <= catch_until_us;
    catch_until_us = 0;
    if (o.not_run && !o.pages_lost) {  // planned ahead of a step that failed: its sequences ended with it
      step_events = core->discard_unrun(*plan);
    } else if (o.not_run) {
      HART_LOG_WARN("worker lost its pages (%s): running sequences recompute", o.result.get_status().message().c_str());
      step_events = core->lose_pages_unrun(*plan);
    } else {
      step_events = core->finish_step(*plan, o.result, o.pages_lost, timing);
      if (core->last_step_decode_only()) {
        const double us = double(o.exec_end_us - o.exec_start_us);
        auto smooth = [us](double& v) { v = v > 0 ? 0.75 * v + 0.25 * us : us; };
        smooth(decode_exec_us);
        smooth(decode_exec_us_by_batch[plan->items.size()]);
      }
    }
    // The next step goes to the worker before these events go to the gateway
    // (start_step sends them; here if the plan waits for the shard or none is due).
    // With a step still in flight (planned ahead), the one after it is planned ahead now.
    if (in_flight.empty()) {
      advance(self, o.exec_end_us, arrived_us);
    } else {
      plan_ahead(self);
      after_plan(self);
    }
    publish(self, std::move(step_events));
    step_events = {};
  }

  void on_submit(scheduler_self self, const sched::gen_request& r) {
    status s = core->submit(r);
    if (!s.ok()) {
      // Refused before it started: the gateway answers with one error reply (protocol §5.1).
      sched::event_batch ev;
      sched::finish_event f;
      f.request_id = r.id;
      f.reason = sched::finish_reason::error;
      f.message = s.message();
      f.refused = true;
      f.code = s.code();
      f.prompt_tokens = int64_t(r.prompt.size());
      ev.finishes.push_back(f);
      publish(self, std::move(ev));
    }
    advance(self);
  }

  void on_control(scheduler_self self, const control_call& c) {
    using protocol::control_verb;
    const protocol::control_request& ctl = c.control;
    switch (ctl.verb) {
      // The ack first, then the aborted samples' finals (protocol §4.2).
      case control_verb::abort: {
        sched::event_batch ev;
        for (uint64_t id : c.ids) ev.append(core->abort(id));
        if (c.ack) reply(self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, uint32_t(c.ids.size())});
        publish(self, std::move(ev));
        break;
      }
      case control_verb::pause: {
        const sched::pause_mode m = ctl.mode == protocol::pause_mode::abort     ? sched::pause_mode::abort
                                    : ctl.mode == protocol::pause_mode::retract ? sched::pause_mode::retract
                                                                                : sched::pause_mode::in_place;
        const int64_t running = core->sched().n_running();
        sched::event_batch ev = core->pause(m);
        // affected: the generations aborted (abort), or the sequences retracted / frozen.
        std::set<uint64_t> aborted;
        for (const sched::finish_event& f : ev.finishes) aborted.insert(f.request_id);
        const int64_t affected = m == sched::pause_mode::abort ? int64_t(aborted.size()) : running;
        reply(self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, uint32_t(affected)});
        publish(self, std::move(ev));
        break;
      }
      case control_verb::resume:
        core->resume();
        reply(self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
        break;
      case control_verb::flush_cache:
        core->flush_cache();
        reply(self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
        break;
      case control_verb::health: {
        const auto uptime_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - params.started).count();
        reply(self, c.client, protocol::health_reply{ctl.tag, true, uint64_t(uptime_us)});
        break;
      }
      case control_verb::stats: {
        send_cache_ops(self);
        const transport::client_id client = c.client;
        const uint64_t tag = ctl.tag;
        self->request(shard(0), caf::infinite, shard_metrics_atom::value)
            .then([=](std::shared_ptr<const cache::cache_metrics> m) {
              reply(self, client, make_stats(core->stats(*m), weight_version, caught, tag));
            });
        break;
      }
      case control_verb::weight_version:
        reply(self, c.client, protocol::weight_version_reply{ctl.tag, weight_version});
        break;
    }
    advance(self);
  }

  void on_swap_request(scheduler_self self, std::shared_ptr<const swap_request> r) {
    if (swap || swapping) {
      swap_outcome busy{failed_precondition("weight swap: another swap is in progress"), weight_version};
      self->send(caf::actor_cast<weight_sync_actor>(self->current_sender()), swapped_atom::value,
                 std::make_shared<const swap_outcome>(std::move(busy)));
      return;
    }
    swap = std::move(r);
    swap_from = caf::actor_cast<weight_sync_actor>(self->current_sender());
    advance(self);
  }

  void on_swapped(scheduler_self self, std::shared_ptr<const swap_outcome> o) {
    swapping = false;
    // Cached prefixes hold KV of the old weights (a relabel keeps them); live sequences keep theirs.
    if (o->result.ok() && !swap->relabel()) core->flush_cache();
    swap.reset();
    weight_version = o->serving_version;
    self->send(swap_from, swapped_atom::value, std::move(o));
    swap_from = weight_sync_actor{};
    advance(self);
  }
};

scheduler_actor::behavior_type scheduler_impl(scheduler_self self,
                             std::shared_ptr<sched::serving_core> core, scheduler_actor_params params) {
  auto& st = self->state;
  st.core = std::move(core);
  st.params = std::move(params);
  st.weight_version = st.params.weight_version;
  for (const cache_shard_actor& s : st.params.shards) self->link_to(s);  // they end together
  return {
      [=](gateway_actor gw) { self->state.gateway = std::move(gw); },
      [=](submit_atom, std::shared_ptr<const submit_request> r) {
        self->state.on_submit(self, r->request);
        self->state.resume_catch(self);
      },
      [=](control_atom, std::shared_ptr<const control_call> c) {
        self->state.on_control(self, *c);
        self->state.resume_catch(self);
      },
      [=](swap_atom, std::shared_ptr<const swap_request> r) { self->state.on_swap_request(self, std::move(r)); },
      [=](swapped_atom, std::shared_ptr<const swap_outcome> o) { self->state.on_swapped(self, std::move(o)); },
      [=](step_done_atom, std::shared_ptr<const step_outcome> o) { self->state.on_step_done(self, *o); },
      [=](retry_atom) {
        self->state.retry_pending = false;
        self->state.advance(self);
      },
      [=](catch_atom, uint64_t gen) { self->state.on_catch(self, gen); },
  };
}

}  // namespace

status_or<scheduler_actor> spawn_scheduler_actor(caf::actor_system& sys, const scheduler_actor_params& given) {
  if (given.shards.size() > 1) {
    return unimplemented("scheduler: %zu cache shards; a step is planned for one attention-DP rank", given.shards.size());
  }
  HART_ASSIGN_OR_RETURN(std::unique_ptr<sched::serving_core> core,
                        sched::serving_core::create_without_shard(given.serving, given.tok));
  scheduler_actor_params params = given;
  if (params.shards.empty()) {
    HART_ASSIGN_OR_RETURN(cache_shard_actor shard, spawn_cache_shard_actor(sys, params.serving.cache, 0));
    params.shards.push_back(std::move(shard));
  }
  // NOTE(hart): detached although it never blocks: its own thread wakes on a
  // condition variable the moment a step outcome arrives, whatever the pool is
  // busy with (gateway, weight sync); the step path is the S1 budget.
  return sys.spawn<caf::detached>(scheduler_impl, std::shared_ptr<sched::serving_core>(std::move(core)), params);
}

}  // namespace hart::actors
