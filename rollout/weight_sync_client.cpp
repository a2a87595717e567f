#include "rollout/weight_sync_client.h"

#include "runtime/transport/curve_auth.h"
#include "runtime/weight_sync/crc_pool.h"
#include "runtime/weight_sync/cuda_ipc.h"
#include "runtime/weight_sync/nccl_group.h"
#include "runtime/weight_sync/sync_codec.h"

#include <climits>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

namespace hart {

using namespace weight_sync;
using steady = std::chrono::steady_clock;

constexpr int k_lane_handshake_ms = 500;  // per lane, then it connects without waiting

status weight_sync_client_params::validate() const {
  if (endpoint.empty()) return invalid_argument("weight_sync_client: endpoint is empty");
  if (reply_timeout.count() < 1 || reply_timeout.count() > INT_MAX) {
    return invalid_argument("weight_sync_client: reply_timeout %lld ms, expected 1..%d",
                            (long long)reply_timeout.count(), INT_MAX);
  }
  if (bucket_bytes == 0 || bucket_bytes > k_max_chunk_bytes) {
    return invalid_argument("weight_sync_client: bucket_bytes %llu, expected 1..%llu",
                            (unsigned long long)bucket_bytes, (unsigned long long)k_max_chunk_bytes);
  }
  if (crc_threads < 0)
    return invalid_argument("weight_sync_client: crc_threads %d must be >= 0", crc_threads);
  if (lanes < 0 || lanes > 64) return invalid_argument("weight_sync_client: lanes %d, expected 0..64", lanes);
  if (frame_bytes == 0 || frame_bytes > k_max_chunk_bytes) {
    return invalid_argument("weight_sync_client: frame_bytes %llu, expected 1..%llu",
                            (unsigned long long)frame_bytes, (unsigned long long)k_max_chunk_bytes);
  }
  return {};
}

struct weight_sync_client::impl {
  weight_sync_client_params params;
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<zmq::socket_t>> socks;  // lane 0 carries begin and end
  std::unique_ptr<crc_pool> crc;                      // checksums the frames
  /// Data frames ZeroMQ still holds (it reads the caller's bytes in place).
  std::shared_ptr<std::atomic<int64_t>> frames_held = std::make_shared<std::atomic<int64_t>>(0);
  /// The NCCL group tensors in CUDA memory are broadcast through (device_via nccl), kept
  /// between pushes while they succeed, and the id it was formed from.
  nccl_group nccl;
  std::vector<uint8_t> nccl_id;

  status open() {
    try {
      socks.clear();
      for (int i = 0; i < n_lanes(); ++i) {
        auto sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
        sock->set(zmq::sockopt::linger, 0);
        sock->set(zmq::sockopt::sndhwm, 0);  // buckets reference caller memory; no copy to bound
        // A DEALER with no connection to send to blocks: a server that refuses the
        // CURVE key (or none at all) must end the push as a missing reply does.
        sock->set(zmq::sockopt::sndtimeo, int(params.reply_timeout.count()));
        HART_RETURN_IF_ERROR(
            transport::curve_client_setup(*sock, params.curve_server_key, params.curve_secret_key));
        if (n_lanes() > 1) {
          connect_after_handshake(*sock, i);
        } else {
          sock->connect(params.endpoint);
        }
        socks.push_back(std::move(sock));
      }
    } catch (const zmq::error_t& e) {
      return status(status_code::unavailable, "weight sync connect " + params.endpoint + ": " + e.what());
    }
    return {};
  }

  // After a failure ZeroMQ may still hold frames that point into the caller's
  // tensors: drop the socket and wait until it let go of every one.
  int n_lanes() const { return params.lanes > 0 ? params.lanes : crc_pool_default_threads(); }

  // Connects `sock` and waits (briefly) for its handshake. ZeroMQ gives a new
  // connection the I/O thread with the fewest sockets, counted once the
  // connection is set up: lanes connected in a burst all land on one thread on
  // both ends (measured: one receive thread for four lanes), lanes connected
  // one after another spread. A server not up yet costs the wait, nothing else.
  void connect_after_handshake(zmq::socket_t& sock, int lane) {
    const std::string addr = "inproc://hart-sync-lane-" + std::to_string(reinterpret_cast<uintptr_t>(this)) +
                             "-" + std::to_string(lane);
    if (zmq_socket_monitor(sock.handle(), addr.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
      sock.connect(params.endpoint);
      return;
    }
    zmq::socket_t mon(ctx, zmq::socket_type::pair);
    mon.connect(addr);
    sock.connect(params.endpoint);
    zmq_pollitem_t item{mon.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(k_lane_handshake_ms)) > 0) {
      std::vector<zmq::message_t> event;
      (void)zmq::recv_multipart(mon, std::back_inserter(event), zmq::recv_flags::dontwait);
    }
    zmq_socket_monitor(sock.handle(), nullptr, 0);
  }

  void release() {
    socks.clear();
    while (frames_held->load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void reset() {
    release();
    (void)open();
  }

  status send_message(const sync_request& r, const std::vector<std::pair<const void*, size_t>>& data = {},
                      size_t lane = 0) {
    HART_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, encode_request(r));
    const auto h = request_header();
    zmq::socket_t* sock = socks[lane].get();
    auto refused = [&] {
      return status(status_code::unavailable, "weight sync: no connection to " + params.endpoint +
                                                  " within " + std::to_string(params.reply_timeout.count()) +
                                                  " ms (no server there, or it refused this client's key)");
    };
    try {
      if (!sock->send(zmq::buffer(h), zmq::send_flags::sndmore)) return refused();
      if (!sock->send(zmq::buffer(payload), data.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore))
        return refused();
      for (size_t i = 0; i < data.size(); ++i) {
        frames_held->fetch_add(1);
        auto* counter = new std::shared_ptr<std::atomic<int64_t>>(frames_held);
        zmq::message_t m(
            const_cast<void*>(data[i].first), data[i].second,
            [](void*, void* hint) {
              auto* c = static_cast<std::shared_ptr<std::atomic<int64_t>>*>(hint);
              (*c)->fetch_sub(1);
              delete c;
            },
            counter);
        if (!sock->send(m, i + 1 < data.size() ? zmq::send_flags::sndmore : zmq::send_flags::none))
          return refused();
      }
    } catch (const zmq::error_t& e) {
      return status(status_code::unavailable, std::string("weight sync send: ") + e.what());
    }
    return {};
  }

  /// The next reply on any lane; with timeout 0, only one already waiting (unavailable if none).
  status_or<sync_reply> receive(std::chrono::milliseconds timeout) {
    std::vector<zmq_pollitem_t> items;
    for (const auto& s : socks) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
    try {
      if (zmq::poll(items.data(), items.size(), timeout) == 0) {
        return status(status_code::unavailable, "weight sync: no reply from " + params.endpoint + " within " +
                                                    std::to_string(timeout.count()) + " ms");
      }
      size_t lane = 0;
      while (!(items[lane].revents & ZMQ_POLLIN)) ++lane;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(*socks[lane], std::back_inserter(frames), zmq::recv_flags::dontwait) ||
          frames.size() != 2) {
        return invalid_argument("weight sync: malformed reply (%zu frames)", frames.size());
      }
      return decode_reply({frames[0].data(), frames[0].size()}, {frames[1].data(), frames[1].size()});
    } catch (const zmq::error_t& e) {
      return status(status_code::unavailable, std::string("weight sync receive: ") + e.what());
    }
  }

  // The reply to `phase`; a failed bucket's error ends the wait too.
  status_or<sync_reply> await(sync_phase phase, uint64_t version) {
    for (;;) {
      HART_ASSIGN_OR_RETURN(sync_reply r, receive(params.reply_timeout));
      if (!r.ok() && (r.version == version || r.version == 0)) return r.to_status();
      if (r.phase == phase && r.version == version) return r;
    }
  }

  // The next error reply for `version`, if one is waiting (a failed bucket is answered at once).
  status early_error(uint64_t version) {
    status_or<sync_reply> r = receive(std::chrono::milliseconds(0));
    if (r.ok() && !r->ok() && (r->version == version || r->version == 0)) return r->to_status();
    return {};
  }

  // Begins update `begin`, by NCCL in the group `nccl` holds or a new one.
  status begin_update(begin_msg begin, int nccl_device, push_report& rep) {
    const bool by_nccl = nccl_device >= 0;
    begin.nccl_reuse = by_nccl && nccl.joined(nccl_id, nccl_device);
    for (;;) {
      if (by_nccl && !begin.nccl_reuse) {
        nccl.close();
        HART_ASSIGN_OR_RETURN(nccl_id, nccl_group::new_id());
      }
      if (by_nccl) begin.nccl_id = nccl_id;
      HART_RETURN_IF_ERROR(send_message(begin));
      status_or<sync_reply> begun = await(sync_phase::begin, begin.version);
      if (!begun.ok() && begin.nccl_reuse && begun.get_status().code() == status_code::not_found) {
        begin.nccl_reuse =
            false;  // the server closed the group since (a restart, another trainer's): form a new one
        continue;
      }
      // Any other refusal leaves a reused group open on both sides.
      if (!begun.ok()) return begun.get_status();
      break;
    }
    if (by_nccl && !begin.nccl_reuse) {
      // The server started joining before its ack; the group forms as both wait in their first broadcast.
      HART_RETURN_IF_ERROR(nccl.join(nccl_id, 0, 2, nccl_device, params.reply_timeout));
      rep.nccl_group_formed = true;
    }
    return {};
  }

  status_or<push_report> push(uint64_t version, const std::vector<tensor_ref>& tensors) {
    push_report rep;
    rep.version = version;
    rep.n_tensors = int64_t(tensors.size());
    if (tensors.empty()) return invalid_argument("push: no tensors");
    for (const tensor_ref& t : tensors) {
      if (!wire_dtype_ok(t.type)) {
        return invalid_argument("push: tensor '%s' has dtype %s; the wire takes BF16, F16, F32, I32, I64",
                                t.name.c_str(), std::string(dtype_name(t.type)).c_str());
      }
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= uint64_t(d < 0 ? 0 : d);
      if (t.name.empty() || t.n_bytes == 0 || !t.data || numel * dtype_size(t.type) != t.n_bytes) {
        return invalid_argument(
            "push: tensor '%s': %zu bytes do not match its shape and dtype (or it is empty)", t.name.c_str(),
            t.n_bytes);
      }
      rep.n_bytes += t.n_bytes;
    }
    // Tensors in CUDA memory go as IPC references, one handle per allocation, or by NCCL from their one
    // device.
    const bool nccl_asked = params.device_via == device_transport::nccl;
    int nccl_device = -1;
    std::vector<weight_sync::cuda_ipc_ref> ipc(tensors.size());
    std::map<uintptr_t, std::vector<uint8_t>> handles;  // allocation base → its handle
    for (size_t i = 0; i < tensors.size(); ++i) {
      const tensor_ref& t = tensors[i];
      if (!t.device) continue;
      if (nccl_asked) {
        auto d = nccl_group::device_of(t.data);
        if (!d.ok())
          return status(d.get_status().code(), "push: tensor '" + t.name + "': " + d.get_status().message());
        if (nccl_device >= 0 && *d != nccl_device) {
          return invalid_argument("push: tensor '%s' is on CUDA device %d, others on %d: NCCL sends from one",
                                  t.name.c_str(), *d, nccl_device);
        }
        nccl_device = *d;
        continue;
      }
      auto ref = weight_sync::cuda_ipc_export(t.data);
      if (!ref.ok())
        return status(ref.get_status().code(),
                      "push: tensor '" + t.name + "': " + ref.get_status().message());
      if (ref->offset + t.n_bytes > ref->allocation_bytes) {
        return invalid_argument("push: tensor '%s': %zu bytes run past its CUDA allocation", t.name.c_str(),
                                t.n_bytes);
      }
      const uintptr_t base = reinterpret_cast<uintptr_t>(t.data) - ref->offset;
      auto [it, fresh] = handles.emplace(base, ref->handle);
      if (!fresh) ref->handle = it->second;  // the server opens an allocation once
      ipc[i] = std::move(*ref);
    }
    const bool by_nccl = nccl_device >= 0;
    const auto t0 = steady::now();
    HART_RETURN_IF_ERROR(
        begin_update(begin_msg{version, uint64_t(tensors.size()), rep.n_bytes}, nccl_device, rep));
    const auto check = [this, version] { return early_error(version); };

    bucket_msg bucket;
    bucket.version = version;
    std::vector<std::pair<const void*, size_t>> frames;
    std::vector<std::pair<const void*, size_t>> broadcasts;  // the bucket's chunks by NCCL, in list order
    uint64_t in_bucket = 0;
    auto flush = [&]() -> status {
      if (bucket.chunks.empty()) return {};
      // By NCCL, all on lane 0: the server posts its receives in the order the buckets arrive.
      HART_RETURN_IF_ERROR(send_message(bucket, frames, by_nccl ? 0 : size_t(bucket.seq % socks.size())));
      for (const auto& [p, n] : broadcasts) HART_RETURN_IF_ERROR(nccl.broadcast(p, n, check));
      ++rep.n_buckets;
      ++bucket.seq;
      bucket.chunks.clear();
      frames.clear();
      broadcasts.clear();
      in_bucket = 0;
      // A failed bucket is answered at once: stop sending instead of streaming into a dropped update.
      return early_error(version);
    };
    status s;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const tensor_ref& t = tensors[i];
      for (uint64_t off = 0; off < t.n_bytes && s.ok();) {
        // A chunk in CUDA memory has no frame (and is outside the CRC); it still fills its bucket.
        const uint64_t n = std::min({t.n_bytes - off, params.bucket_bytes - in_bucket,
                                     t.device ? k_max_chunk_bytes : params.frame_bytes});
        weight_sync::chunk_desc c{t.name, t.type, t.shape, off, n};
        const auto* p = static_cast<const uint8_t*>(t.data) + off;
        if (t.device && by_nccl) {
          c.nccl = true;
          broadcasts.emplace_back(p, size_t(n));  // from the tensor's own memory, in place
        } else if (t.device) {
          c.ipc_handle = ipc[i].handle;
          c.ipc_offset = ipc[i].offset + off;
        } else {
          frames.emplace_back(p, size_t(n));
          rep.crc32c = crc->extend(rep.crc32c, p, n);
        }
        bucket.chunks.push_back(std::move(c));
        off += n;
        in_bucket += n;
        if (in_bucket == params.bucket_bytes || bucket.chunks.size() == k_max_chunks_per_bucket) s = flush();
      }
    }
    if (s.ok()) s = flush();
    // Every broadcast has landed: the server has staged each chunk before reading the end.
    if (s.ok() && by_nccl) s = nccl.drain(check);
    // The count lets the server wait for buckets still in flight on other lanes.
    if (s.ok()) s = send_message(end_msg{version, rep.crc32c, uint64_t(rep.n_buckets)});
    status_or<sync_reply> ended = s.ok() ? await(sync_phase::end, version) : status_or<sync_reply>(s);
    if (!ended.ok()) {
      if (by_nccl) nccl.close();  // the server closes its side too; nothing reads the tensors any more
      reset();
      return ended.get_status();
    }
    rep.total_s = std::chrono::duration<double>(steady::now() - t0).count();
    rep.build_s = double(ended->build_us) * 1e-6;
    rep.swap_s = double(ended->swap_us) * 1e-6;
    rep.transfer_s = std::max(1e-9, rep.total_s - rep.build_s - rep.swap_s);
    rep.gb_per_s = double(rep.n_bytes) / rep.transfer_s * 1e-9;
    return rep;
  }
};

weight_sync_client::weight_sync_client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

weight_sync_client::~weight_sync_client() {
  if (impl_) impl_->release();
}

status_or<std::unique_ptr<weight_sync_client>> weight_sync_client::connect(
    const weight_sync_client_params& params) {
  HART_RETURN_IF_ERROR(params.validate());
  auto p = std::make_unique<impl>();
  p->params = params;
  p->crc =
      std::make_unique<crc_pool>(params.crc_threads > 0 ? params.crc_threads : crc_pool_default_threads());
  try {
    p->ctx.set(zmq::ctxopt::io_threads, p->n_lanes());  // each lane's send copy on its own thread
  } catch (const zmq::error_t& e) {
    return internal_error("weight sync: %s", e.what());
  }
  HART_RETURN_IF_ERROR(p->open());
  return std::unique_ptr<weight_sync_client>(new weight_sync_client(std::move(p)));
}

status_or<push_report> weight_sync_client::push(uint64_t version, const std::vector<tensor_ref>& tensors) {
  return impl_->push(version, tensors);
}

}  // namespace hart
