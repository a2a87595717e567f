#include "actors/weight_sync_actor.h"

#include "runtime/core/log.h"
#include "runtime/model/config.h"
#include "runtime/model/engine.h"
#include "runtime/model/tensor_source.h"

#include <optional>

namespace hart::actors {
namespace {

using weight_sync::sync_phase;
using weight_sync::sync_reply;
using steady = std::chrono::steady_clock;

struct weight_sync_state {
  weight_sync_actor_params params;
  /// The update being received (at most one).
  weight_sync::update_staging staging;
  /// Who began the staged update, so a replacing begin can tell it.
  std::string owner;
  /// The version serving now; only this actor changes it (through the scheduler actor).
  uint64_t serving_version = 0;
  /// An end that overtook some of its buckets (sent on other connections): runs once they are in.
  std::optional<std::pair<std::string, weight_sync::end_msg>> parked_end;
  /// The sender's CUDA allocations opened for this update's chunks in CUDA memory; closed when it ends.
  weight_sync::cuda_ipc_reader ipc;
  /// The NCCL group a trainer broadcasts chunks through (Begin.ncclUniqueId). Kept after a
  /// successful update for the trainer's next one (forming it costs an NCCL init).
  weight_sync::nccl_group nccl;
  /// The staged update receives through `nccl`.
  bool nccl_update = false;

  explicit weight_sync_state(const weight_sync_actor_params& p)
      : params(p), staging(p.limits), serving_version(p.target->version()) {}

  void answer(const std::string& client, sync_reply r) {
    if (!params.server) return;  // only local updates (no sync socket)
    r.serving_version = serving_version;
    status s = params.server->send(client, r);
    if (!s.ok()) HART_LOG_WARN("weight sync reply dropped: %s", s.to_string().c_str());
  }

  // The staged update's NCCL group goes with a failed or dropped update: the
  // trainer gives its side up then too, and a broadcast may still be in flight.
  void drop_nccl() {
    if (nccl_update) nccl.close();
    nccl_update = false;
  }

  // Joins the trainer's NCCL group for the update `m` begins, or reuses the one it formed earlier.
  status open_nccl(const weight_sync::begin_msg& m) {
    if (!m.nccl_reuse) return nccl.join(m.nccl_id, 1, 2, params.cuda_device, params.idle_timeout);
    if (!nccl.joined(m.nccl_id, params.cuda_device)) {
      return not_found(
          "no NCCL group with this id is open here (closed by a failed update, another trainer's "
          "group, or a restart): begin with a fresh id");
    }
    return {};
  }

  static sync_reply reply_of(uint64_t version, sync_phase phase, const status& s, uint64_t seq = 0) {
    sync_reply r;
    r.version = version;
    r.phase = phase;
    r.seq = seq;
    r.code = s.code();
    r.message = s.message();
    return r;
  }

  void on_begin(const std::string& client, const weight_sync::begin_msg& m) {
    if (staging.active()) {
      HART_LOG_WARN("weight sync: update %llu replaced by update %llu", (unsigned long long)staging.version(),
                    (unsigned long long)m.version);
      if (owner != client) {
        answer(owner, reply_of(staging.version(), sync_phase::end,
                               status(status_code::cancelled,
                                      "replaced by a new begin (update " + std::to_string(m.version) + ")")));
      }
      drop_nccl();
    }
    parked_end.reset();
    ipc.close();
    status s = staging.begin(m, serving_version);
    if (s.ok() && !m.nccl_id.empty()) {
      s = open_nccl(m);
      if (s.ok()) {
        nccl_update =
            true;  // a new group forms as the trainer joins after this ack; the first chunk waits for it
      } else {
        staging.discard();
      }
    }
    owner = client;
    answer(client, reply_of(m.version, sync_phase::begin, s));
  }

  void on_bucket(caf::blocking_actor* self, const weight_sync::inbound_sync& in,
                 const weight_sync::bucket_msg& b) {
    status s = staging.begin_bucket(b.version, b.seq);
    if (s.ok() && nccl_update && b.seq + 1 != staging.buckets_received()) {
      // Both ranks must call NCCL in one order: the trainer's, buckets in seq order on one connection.
      s = invalid_argument(
          "bucket %llu arrived before bucket %llu: an update by NCCL sends its buckets in seq "
          "order on one connection",
          (unsigned long long)b.seq, (unsigned long long)(staging.buckets_received() - 1));
      staging.discard();
    }
    size_t frame = 0;  // chunks in CUDA memory have no data frame (the codec checked the count)
    for (const weight_sync::chunk_desc& c : b.chunks) {
      if (!s.ok()) break;
      if (c.nccl) {
        s = staging.add_by_nccl(b.version, c, nccl_update ? &nccl : nullptr);
      } else if (c.in_cuda_memory()) {
        s = staging.add_from_cuda(b.version, c, ipc);
      } else {
        s = staging.add(b.version, c, in.data[frame++].data);
      }
    }
    if (!s.ok()) {
      if (!staging.active()) drop_nccl();  // not for a stray bucket of another update
      answer(in.client, reply_of(b.version, sync_phase::bucket, s, b.seq));
      if (parked_end) {  // its sender may listen on another connection
        answer(parked_end->first, reply_of(parked_end->second.version, sync_phase::end, s));
        parked_end.reset();
      }
      return;
    }
    if (parked_end && staging.buckets_received() >= parked_end->second.n_buckets) {
      auto [client, m] = std::move(*parked_end);
      parked_end.reset();
      on_end(self, client, m);
    }
  }

  // Has the scheduler swap `w` in (or relabel the serving weights, when null) at its next step
  // boundary as `version`, and waits for the outcome.
  status swap_in(caf::blocking_actor* self, std::shared_ptr<built_weights> w, uint64_t version) {
    status swapped = status(status_code::unavailable, "the engine did not swap within the swap timeout");
    self->send(params.engine_actor, swap_atom::value,
               std::make_shared<const swap_request>(swap_request{std::move(w), version}));
    self->receive(
        [&](swapped_atom, std::shared_ptr<const swap_outcome> o) {
          swapped = o->result;
          if (swapped.ok()) serving_version = o->serving_version;
        },
        caf::after(params.swap_timeout) >> [] {});
    return swapped;
  }

  status run_local(caf::blocking_actor* self, const local_update& u, uint64_t version) {
    if (staging.active()) {
      return failed_precondition(
          "weight update %llu is being pushed over the weight-sync socket; try again when "
          "it ends",
          (unsigned long long)staging.version());
    }
    HART_RETURN_IF_ERROR(weight_version_check("weight update", version, serving_version));
    if (u.checkpoint_dir.empty()) return swap_in(self, nullptr, version);
    HART_ASSIGN_OR_RETURN(model_config cfg, model_config_load(u.checkpoint_dir));
    HART_RETURN_IF_ERROR(model_config_same_shapes(params.serving_config, cfg, u.checkpoint_dir));
    HART_ASSIGN_OR_RETURN(auto src, checkpoint_source_open(u.checkpoint_dir));
    const auto t0 = steady::now();
    HART_ASSIGN_OR_RETURN(auto built, params.target->build(*src));
    src.reset();
    const auto t1 = steady::now();
    HART_RETURN_IF_ERROR(swap_in(self, std::move(built), version));
    HART_LOG_INFO("weight version %llu serving, from %s (build %.3f s, swap %.3f s)",
                  (unsigned long long)version, u.checkpoint_dir.c_str(),
                  std::chrono::duration<double>(t1 - t0).count(),
                  std::chrono::duration<double>(steady::now() - t1).count());
    return {};
  }

  void on_local(caf::blocking_actor* self, const local_update& u) {
    const uint64_t version = u.version ? u.version : serving_version + 1;
    swap_outcome o;
    o.result = run_local(self, u, version);
    o.serving_version = serving_version;
    if (!o.result.ok()) {
      HART_LOG_WARN("weight update %llu%s%s failed: %s", (unsigned long long)version,
                    u.checkpoint_dir.empty() ? " (relabel)" : " from ", u.checkpoint_dir.c_str(),
                    o.result.to_string().c_str());
    } else if (u.checkpoint_dir.empty()) {
      HART_LOG_INFO("weight version %llu serving (relabelled; the weights are unchanged)",
                    (unsigned long long)version);
    }
    if (u.done) u.done(o);
  }

  void on_end(caf::blocking_actor* self, const std::string& client, const weight_sync::end_msg& m) {
    if (staging.active() && m.version == staging.version() && m.n_buckets > staging.buckets_received()) {
      parked_end.emplace(client, m);  // the rest of its buckets are still on their way
      return;
    }
    const uint64_t bytes = staging.bytes_received();
    auto src = staging.finish(m);
    ipc.close();  // every chunk is staged (or the update is gone): the trainer may free its memory
    if (!src.ok()) {
      if (!staging.active()) drop_nccl();
      answer(client, reply_of(m.version, sync_phase::end, src.get_status()));
      return;
    }
    // Every broadcast is in (each chunk was received before the next message was read): the
    // group is idle, kept for the trainer's next update unless this one fails below.
    const bool by_nccl = nccl_update;
    nccl_update = false;
    const auto t0 = steady::now();
    auto built = params.target->build(**src);
    src->reset();  // the raw bytes are not needed once built
    const auto t1 = steady::now();
    if (!built.ok()) {
      if (by_nccl) nccl.close();
      answer(client, reply_of(m.version, sync_phase::end, built.get_status()));
      return;
    }
    const status swapped = swap_in(self, std::move(built).value(), m.version);
    sync_reply r = reply_of(m.version, sync_phase::end, swapped);
    r.bytes_received = bytes;
    r.build_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
    r.swap_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - t1).count());
    if (swapped.ok()) {
      HART_LOG_INFO("weight version %llu serving (%llu bytes; build %.3f s, swap %.3f s)",
                    (unsigned long long)m.version, (unsigned long long)bytes, r.build_us * 1e-6,
                    r.swap_us * 1e-6);
    } else if (by_nccl) {
      nccl.close();  // the trainer closes its side on any error
    }
    answer(client, r);
  }

  void on_message(caf::blocking_actor* self, const weight_sync::inbound_sync& in) {
    if (const auto* m = std::get_if<weight_sync::begin_msg>(&in.request)) {
      on_begin(in.client, *m);
    } else if (const auto* m = std::get_if<weight_sync::bucket_msg>(&in.request)) {
      on_bucket(self, in, *m);
    } else if (const auto* m = std::get_if<weight_sync::end_msg>(&in.request)) {
      on_end(self, in.client, *m);
    } else {
      const auto& a = std::get<weight_sync::abort_msg>(in.request);
      status s;
      if (staging.active() && staging.version() == a.version) {
        staging.discard();
        parked_end.reset();
        ipc.close();
        drop_nccl();
      } else {
        s = failed_precondition("no update %llu is staged", (unsigned long long)a.version);
      }
      answer(in.client, reply_of(a.version, sync_phase::abort, s));
    }
  }
};

void weight_sync_loop(caf::blocking_actor* self, std::shared_ptr<weight_sync_state> st) {
  for (bool running = true; running;) {
    self->receive(
        [&](sync_atom, std::shared_ptr<const weight_sync::inbound_sync> m) { st->on_message(self, *m); },
        [&](local_update_atom, std::shared_ptr<const local_update> u) { st->on_local(self, *u); },
        [&](caf::exit_msg& m) {
          running = false;
          self->fail_state(m.reason);
        },
        caf::after(st->params.idle_timeout) >>
            [&] {
              if (!st->staging.active()) return;
              HART_LOG_WARN("weight sync: update %llu idle for %lld ms, dropped",
                            (unsigned long long)st->staging.version(),
                            (long long)st->params.idle_timeout.count());
              if (st->parked_end) {
                st->answer(
                    st->parked_end->first,
                    st->reply_of(st->parked_end->second.version, sync_phase::end,
                                 status(status_code::unavailable,
                                        "update dropped: " + std::to_string(st->staging.buckets_received()) +
                                            " of " + std::to_string(st->parked_end->second.n_buckets) +
                                            " buckets arrived before the idle timeout")));
                st->parked_end.reset();
              }
              st->staging.discard();
              st->ipc.close();
              st->drop_nccl();
            });
  }
}

}  // namespace

weight_sync_actor spawn_weight_sync_actor(caf::actor_system& sys, const weight_sync_actor_params& params) {
  return typed_handle<weight_sync_actor>(
      sys.spawn<caf::detached>(weight_sync_loop, std::make_shared<weight_sync_state>(params)));
}

}  // namespace hart::actors
