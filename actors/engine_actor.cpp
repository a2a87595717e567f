#include "actors/engine_actor.h"

#include <sstream>

#include "runtime/core/log.h"

namespace hart::actors {
namespace {

using namespace std::chrono_literals;

struct engine_state {
  engine_actor_params params;
  std::unique_ptr<sched::serving_loop> loop;
  caf::actor gateway;
};

protocol::stats_reply make_stats(const sched::serving_stats& s, uint64_t weight_version, uint64_t tag) {
  protocol::stats_reply r;
  r.tag = tag;
  r.entries = {{"queue_depth", double(s.waiting)},
               {"running", double(s.running)},
               {"steps", double(s.steps)},
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
               {"cache_hit_rate", s.cache_hit_rate},
               {"cache_full_pages_used", double(s.cache.full_pages_used)},
               {"cache_full_pages_total", double(s.cache.full_pages_total)},
               {"cache_swa_pages_used", double(s.cache.swa_pages_used)},
               {"cache_swa_pages_total", double(s.cache.swa_pages_total)},
               {"cache_evicted_full_pages", double(s.cache.evicted_full_pages)},
               {"worker_failures", double(s.worker_failures)},
               {"weight_version", double(weight_version)}};
  std::ostringstream prom;
  for (const auto& [name, value] : r.entries) prom << "hart_" << name << ' ' << value << '\n';
  r.prometheus = prom.str();
  return r;
}

void reply(engine_state& st, caf::blocking_actor* self, const transport::client_id& client, protocol::reply r) {
  self->send(st.gateway, reply_atom::value, std::make_shared<const addressed_reply>(addressed_reply{client, std::move(r)}));
}

// Every event goes out with the weight version serving now: weights change only
// between steps, on this thread, so that is the version that produced it.
void publish(engine_state& st, caf::blocking_actor* self, sched::event_batch ev) {
  if (!ev.empty()) {
    self->send(st.gateway, events_atom::value, std::make_shared<const sched::event_batch>(std::move(ev)),
               st.params.eng->weight_version());
  }
}

swap_outcome swap_weights(engine_state& st, const swap_request& r) {
  swap_outcome o;
  o.result = st.params.make_executor
                 ? unimplemented("weight swap: the engine runs in a worker process (--worker-process)")
                 : st.params.eng->swap_weights(r.weights, r.version);
  // Cached prefixes hold KV of the old weights; live sequences keep theirs.
  if (o.result.ok()) st.loop->flush_cache();
  o.serving_version = st.params.eng->weight_version();
  return o;
}

void handle_control(engine_state& st, caf::blocking_actor* self, const control_call& c) {
  using protocol::control_verb;
  const protocol::control_request& ctl = c.control;
  const auto uptime_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - st.params.started).count();
  switch (ctl.verb) {
    case control_verb::abort: {
      sched::event_batch ev;
      for (uint64_t id : c.ids) ev.append(st.loop->abort(id));
      publish(st, self, std::move(ev));
      reply(st, self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, uint32_t(c.ids.size())});
      break;
    }
    case control_verb::pause: {
      const sched::pause_mode m = ctl.mode == protocol::pause_mode::abort     ? sched::pause_mode::abort
                                  : ctl.mode == protocol::pause_mode::retract ? sched::pause_mode::retract
                                                                              : sched::pause_mode::in_place;
      publish(st, self, st.loop->pause(m));
      reply(st, self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
      break;
    }
    case control_verb::resume:
      st.loop->resume();
      reply(st, self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
      break;
    case control_verb::flush_cache:
      st.loop->flush_cache();
      reply(st, self, c.client, protocol::ack_reply{ctl.tag, ctl.verb, 0});
      break;
    case control_verb::health:
      reply(st, self, c.client, protocol::health_reply{ctl.tag, true, uint64_t(uptime_us)});
      break;
    case control_verb::stats:
      reply(st, self, c.client, make_stats(st.loop->stats(), st.params.eng->weight_version(), ctl.tag));
      break;
    case control_verb::weight_version:
      reply(st, self, c.client, protocol::weight_version_reply{ctl.tag, st.params.eng->weight_version()});
      break;
  }
}

void engine_loop(caf::blocking_actor* self, std::shared_ptr<engine_state> st) {
  bool running = true;
  for (;;) {
    // Drain the mailbox; wait only when there is nothing to step. With work
    // pending, messages are taken only while some are queued: a receive with a
    // zero timeout would still round-trip through CAF's timer.
    const bool work = !st->loop->idle() && !st->loop->sched().paused();
    bool got = true;
    for (bool first = true; running && got; first = false) {
      got = false;
      if ((work || !first) && !self->has_next_message()) break;
      const auto wait = (work || !first) ? 0ms : 200ms;
      self->receive(
          [&](caf::actor gw) {
            st->gateway = gw;
            got = true;
          },
          [&](submit_atom, std::shared_ptr<const submit_request> r) {
            got = true;
            status s = st->loop->submit(r->request);
            if (!s.ok()) {
              sched::event_batch ev;
              sched::finish_event f;
              f.request_id = r->request.id;
              f.reason = sched::finish_reason::error;
              f.message = s.to_string();
              f.prompt_tokens = int64_t(r->request.prompt.size());
              for (int32_t i = 0; i < std::max(1, r->request.n); ++i) {
                f.sample = i;
                ev.finishes.push_back(f);
              }
              publish(*st, self, std::move(ev));
            }
          },
          [&](control_atom, std::shared_ptr<const control_call> c) {
            got = true;
            handle_control(*st, self, *c);
          },
          [&](swap_atom, std::shared_ptr<const swap_request> r) {
            got = true;
            self->send(caf::actor_cast<caf::actor>(self->current_sender()), swapped_atom::value,
                       std::make_shared<const swap_outcome>(swap_weights(*st, *r)));
          },
          [&](caf::exit_msg& m) {
            running = false;
            self->fail_state(m.reason);
          },
          caf::after(wait) >> [] {});
    }
    if (!running) break;
    if (!st->loop->idle() && !st->loop->sched().paused()) {
      const int64_t before = st->loop->sched().counters().steps;
      publish(*st, self, st->loop->step());
      // A step that planned nothing (everything waiting on memory) must not spin.
      if (st->loop->sched().counters().steps == before) {
        self->receive(
            [&](caf::exit_msg& m) {
              running = false;
              self->fail_state(m.reason);
            },
            caf::after(5ms) >> [] {});
        if (!running) break;
      }
    }
  }
}

}  // namespace

status_or<caf::actor> spawn_engine_actor(caf::actor_system& sys, const engine_actor_params& params) {
  auto st = std::make_shared<engine_state>();
  st->params = params;
  std::unique_ptr<sched::step_executor> executor;
  if (params.make_executor) {
    HART_ASSIGN_OR_RETURN(executor, params.make_executor());
  }
  HART_ASSIGN_OR_RETURN(st->loop, sched::serving_loop::create(*params.eng, params.serving, params.tok, std::move(executor)));
  return sys.spawn<caf::detached>(engine_loop, st);
}

}  // namespace hart::actors
