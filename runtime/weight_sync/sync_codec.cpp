#include "runtime/weight_sync/sync_codec.h"

#include "runtime/protocol/capnp_frame.h"
#include "runtime/weight_sync/weight_sync.capnp.h"

#include <utility>

namespace hart::weight_sync {
namespace {

namespace w = hart::wire::sync;

bool to_wire(dtype t, w::DType* out) {
  switch (t) {
    case dtype::bf16:
      *out = w::DType::BF16;
      return true;
    case dtype::f16:
      *out = w::DType::F16;
      return true;
    case dtype::f32:
      *out = w::DType::F32;
      return true;
    case dtype::i32:
      *out = w::DType::I32;
      return true;
    case dtype::i64:
      *out = w::DType::I64;
      return true;
    default:
      return false;
  }
}

bool from_wire(w::DType t, dtype* out) {
  switch (t) {
    case w::DType::BF16:
      *out = dtype::bf16;
      return true;
    case w::DType::F16:
      *out = dtype::f16;
      return true;
    case w::DType::F32:
      *out = dtype::f32;
      return true;
    case w::DType::I32:
      *out = dtype::i32;
      return true;
    case w::DType::I64:
      *out = dtype::i64;
      return true;
  }
  return false;
}

// The frames of this wire; capnp_frame turns kj::Exception into a status (style R28).
constexpr protocol::capnp_frame_limits frame_limits{"payload", k_max_message_bytes,
                                                    4 * (k_max_message_bytes / sizeof(capnp::word)), 16};

template <typename Root, typename Fill>
status_or<std::vector<uint8_t>> encode(Fill&& fill) {
  return protocol::capnp_frame_write("weight sync encode", 1024,
                                     [&](capnp::MessageBuilder& mb) { return fill(mb.initRoot<Root>()); });
}

status check_header(frame_view h, uint8_t kind) {
  if (h.size != 2 || !h.data)
    return invalid_argument("frame header: %zu bytes, expected 2 [version, kind]", h.size);
  const auto* b = static_cast<const uint8_t*>(h.data);
  if (b[0] != k_protocol_version) {
    return invalid_argument("frame header: protocol version %u, this peer speaks %u", b[0],
                            k_protocol_version);
  }
  if (b[1] != kind) return invalid_argument("frame header: kind %u, expected %u (weight sync)", b[1], kind);
  return {};
}

template <typename Root, typename Read>
auto decode(frame_view header, frame_view payload, uint8_t kind, Read&& read)
    -> decltype(read(std::declval<typename Root::Reader>())) {
  HART_RETURN_IF_ERROR(check_header(header, kind));
  return protocol::capnp_frame_decode<Root>(payload.data, payload.size, frame_limits,
                                            std::forward<Read>(read));
}

status_or<chunk_desc> read_chunk(w::Chunk::Reader c, size_t i) {
  chunk_desc d;
  const auto name = c.getName();
  if (name.size() == 0 || name.size() > k_max_name_bytes) {
    return invalid_argument("bucket chunk %zu: name of %zu bytes, expected 1..%zu", i, size_t(name.size()),
                            k_max_name_bytes);
  }
  d.name.assign(name.cStr(), name.size());
  if (!from_wire(c.getDtype(), &d.type)) {
    return invalid_argument("bucket chunk %zu ('%s'): unknown dtype %u", i, d.name.c_str(),
                            unsigned(c.getDtype()));
  }
  const auto shape = c.getShape();
  if (shape.size() > k_max_rank)
    return invalid_argument("chunk '%s': rank %u over %zu", d.name.c_str(), shape.size(), k_max_rank);
  uint64_t numel = 1;
  for (int64_t s : shape) {
    if (s < 0 || (s > 0 && numel > (uint64_t(1) << 50) / uint64_t(s))) {
      return invalid_argument("chunk '%s': dimension %lld out of range", d.name.c_str(), (long long)s);
    }
    d.shape.push_back(s);
    numel *= uint64_t(s);
  }
  d.byte_offset = c.getByteOffset();
  d.n_bytes = c.getLength();
  const uint64_t tensor_bytes = numel * dtype_size(d.type);
  if (d.n_bytes == 0 || d.n_bytes > k_max_chunk_bytes || d.byte_offset > tensor_bytes ||
      d.n_bytes > tensor_bytes - d.byte_offset) {
    return invalid_argument("chunk '%s': bytes [%llu, +%llu) outside the tensor's %llu bytes (or empty)",
                            d.name.c_str(), (unsigned long long)d.byte_offset, (unsigned long long)d.n_bytes,
                            (unsigned long long)tensor_bytes);
  }
  if (c.hasIpcHandle()) {
    const auto h = c.getIpcHandle();
    if (h.size() != k_ipc_handle_bytes) {
      return invalid_argument("chunk '%s': CUDA IPC handle of %zu bytes, expected %zu", d.name.c_str(),
                              size_t(h.size()), k_ipc_handle_bytes);
    }
    d.ipc_handle.assign(h.begin(), h.end());
    d.ipc_offset = c.getIpcOffset();
  }
  d.nccl = c.getNccl();
  if (d.nccl && c.hasIpcHandle()) {
    return invalid_argument("chunk '%s': both a CUDA IPC handle and nccl", d.name.c_str());
  }
  return d;
}

status check_nccl_id(const std::vector<uint8_t>& id, bool reuse) {
  if (!id.empty() && id.size() != k_nccl_id_bytes) {
    return invalid_argument("begin: NCCL unique id of %zu bytes, expected %zu", id.size(), k_nccl_id_bytes);
  }
  if (reuse && id.empty()) return invalid_argument("begin: ncclReuse without an ncclUniqueId");
  return {};
}

}  // namespace

bool wire_dtype_ok(dtype t) {
  w::DType x;
  return to_wire(t, &x);
}

std::array<uint8_t, 2> request_header() {
  return {k_protocol_version, k_kind_request};
}
std::array<uint8_t, 2> reply_header() {
  return {k_protocol_version, k_kind_reply};
}

status_or<std::vector<uint8_t>> encode_request(const sync_request& r) {
  return encode<w::SyncRequest>([&](w::SyncRequest::Builder b) -> status {
    if (const auto* m = std::get_if<begin_msg>(&r)) {
      auto o = b.initBegin();
      o.setVersion(m->version);
      o.setTensorCount(m->n_tensors);
      o.setTotalBytes(m->total_bytes);
      HART_RETURN_IF_ERROR(check_nccl_id(m->nccl_id, m->nccl_reuse));
      if (!m->nccl_id.empty()) o.setNcclUniqueId(capnp::Data::Reader(m->nccl_id.data(), m->nccl_id.size()));
      o.setNcclReuse(m->nccl_reuse);
    } else if (const auto* m = std::get_if<bucket_msg>(&r)) {
      auto o = b.initBucket();
      o.setVersion(m->version);
      o.setSeq(m->seq);
      auto cs = o.initChunks(unsigned(m->chunks.size()));
      for (size_t i = 0; i < m->chunks.size(); ++i) {
        const chunk_desc& d = m->chunks[i];
        w::DType t;
        if (!to_wire(d.type, &t))
          return invalid_argument("chunk '%s': dtype %s cannot be sent", d.name.c_str(),
                                  std::string(dtype_name(d.type)).c_str());
        auto c = cs[unsigned(i)];
        c.setName(d.name);
        c.setDtype(t);
        auto sh = c.initShape(unsigned(d.shape.size()));
        for (size_t k = 0; k < d.shape.size(); ++k) sh.set(unsigned(k), d.shape[k]);
        c.setByteOffset(d.byte_offset);
        c.setLength(d.n_bytes);
        if (d.nccl && !d.ipc_handle.empty()) {
          return invalid_argument("chunk '%s': both a CUDA IPC handle and nccl", d.name.c_str());
        }
        c.setNccl(d.nccl);
        if (!d.ipc_handle.empty()) {
          if (d.ipc_handle.size() != k_ipc_handle_bytes) {
            return invalid_argument("chunk '%s': CUDA IPC handle of %zu bytes, expected %zu", d.name.c_str(),
                                    d.ipc_handle.size(), k_ipc_handle_bytes);
          }
          c.setIpcHandle(capnp::Data::Reader(d.ipc_handle.data(), d.ipc_handle.size()));
          c.setIpcOffset(d.ipc_offset);
        }
      }
    } else if (const auto* m = std::get_if<end_msg>(&r)) {
      auto o = b.initEnd();
      o.setVersion(m->version);
      o.setCrc32c(m->crc32c);
      o.setBucketCount(m->n_buckets);
    } else {
      b.initAbort().setVersion(std::get<abort_msg>(r).version);
    }
    return {};
  });
}

status_or<std::vector<uint8_t>> encode_reply(const sync_reply& r) {
  return encode<w::SyncReply>([&](w::SyncReply::Builder b) -> status {
    b.setVersion(r.version);
    b.setPhase(static_cast<w::Phase>(r.phase));
    b.setSeq(r.seq);
    b.setCode(static_cast<w::ErrorCode>(r.code));
    b.setMessage(r.message);
    b.setServingVersion(r.serving_version);
    b.setBytesReceived(r.bytes_received);
    b.setBuildUs(r.build_us);
    b.setSwapUs(r.swap_us);
    return {};
  });
}

status_or<sync_request> decode_request(frame_view header, frame_view payload,
                                       const std::vector<frame_view>& data) {
  return decode<w::SyncRequest>(
      header, payload, k_kind_request, [&](w::SyncRequest::Reader r) -> status_or<sync_request> {
        if (r.which() != w::SyncRequest::BUCKET && !data.empty()) {
          return invalid_argument("frames: %zu data frames after a message that carries none", data.size());
        }
        switch (r.which()) {
          case w::SyncRequest::BEGIN: {
            auto b = r.getBegin();
            begin_msg m{b.getVersion(), b.getTensorCount(), b.getTotalBytes()};
            if (m.n_tensors == 0) return invalid_argument("begin: tensorCount is 0");
            if (b.hasNcclUniqueId()) m.nccl_id.assign(b.getNcclUniqueId().begin(), b.getNcclUniqueId().end());
            m.nccl_reuse = b.getNcclReuse();
            HART_RETURN_IF_ERROR(check_nccl_id(m.nccl_id, m.nccl_reuse));
            return sync_request{m};
          }
          case w::SyncRequest::BUCKET: {
            auto b = r.getBucket();
            bucket_msg m;
            m.version = b.getVersion();
            m.seq = b.getSeq();
            auto cs = b.getChunks();
            if (cs.size() == 0 || cs.size() > k_max_chunks_per_bucket) {
              return invalid_argument("bucket %llu: %u chunks, expected 1..%zu", (unsigned long long)m.seq,
                                      cs.size(), k_max_chunks_per_bucket);
            }
            size_t frame = 0;  // chunks in CUDA memory have none
            for (unsigned i = 0; i < cs.size(); ++i) {
              HART_ASSIGN_OR_RETURN(chunk_desc d, read_chunk(cs[i], i));
              if (!d.in_cuda_memory()) {
                if (frame >= data.size()) {
                  return invalid_argument(
                      "bucket %llu: more chunks outside CUDA memory than the %zu data frames",
                      (unsigned long long)m.seq, data.size());
                }
                if (data[frame].size != d.n_bytes) {
                  return invalid_argument(
                      "bucket %llu chunk '%s': length %llu but its data frame has %zu bytes",
                      (unsigned long long)m.seq, d.name.c_str(), (unsigned long long)d.n_bytes,
                      data[frame].size);
                }
                ++frame;
              }
              m.chunks.push_back(std::move(d));
            }
            if (frame != data.size()) {
              return invalid_argument("bucket %llu: %zu chunks carry data frames but %zu frames came",
                                      (unsigned long long)m.seq, frame, data.size());
            }
            return sync_request{std::move(m)};
          }
          case w::SyncRequest::END: {
            const auto e = r.getEnd();
            return sync_request{end_msg{e.getVersion(), e.getCrc32c(), e.getBucketCount()}};
          }
          case w::SyncRequest::ABORT:
            return sync_request{abort_msg{r.getAbort().getVersion()}};
        }
        return invalid_argument("request: unknown kind %u", unsigned(r.which()));
      });
}

status_or<sync_reply> decode_reply(frame_view header, frame_view payload) {
  return decode<w::SyncReply>(header, payload, k_kind_reply,
                              [&](w::SyncReply::Reader r) -> status_or<sync_reply> {
                                sync_reply o;
                                o.version = r.getVersion();
                                const unsigned phase = unsigned(r.getPhase()), code = unsigned(r.getCode());
                                if (phase > unsigned(sync_phase::frame))
                                  return invalid_argument("reply: unknown phase %u", phase);
                                if (code > unsigned(status_code::unimplemented))
                                  return invalid_argument("reply: unknown code %u", code);
                                o.phase = static_cast<sync_phase>(phase);
                                o.code = static_cast<status_code>(code);
                                o.seq = r.getSeq();
                                o.message = r.getMessage().cStr();
                                o.serving_version = r.getServingVersion();
                                o.bytes_received = r.getBytesReceived();
                                o.build_us = r.getBuildUs();
                                o.swap_us = r.getSwapUs();
                                return o;
                              });
}

const char* sync_phase_name(sync_phase p) {
  switch (p) {
    case sync_phase::begin:
      return "begin";
    case sync_phase::bucket:
      return "bucket";
    case sync_phase::end:
      return "end";
    case sync_phase::abort:
      return "abort";
    case sync_phase::frame:
      return "frame";
  }
  return "?";
}

status sync_reply::to_status() const {
  if (ok()) return {};
  return status(code, std::string("weight sync ") + sync_phase_name(phase) + ": " + message);
}

}  // namespace hart::weight_sync
