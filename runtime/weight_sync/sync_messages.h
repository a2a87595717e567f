// File: runtime/weight_sync/sync_messages.h
// The weight-sync messages (weight_sync.capnp) as plain C++ values, and the
// limits the server enforces. A bucket's tensor bytes are not here: they are
// the raw data frames after it, one per chunk.
#pragma once

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hart::weight_sync {

inline constexpr uint8_t k_protocol_version = 1;
inline constexpr uint8_t k_kind_request = 3;  ///< client -> server, root SyncRequest
inline constexpr uint8_t k_kind_reply = 4;    ///< server -> client, root SyncReply
/// Largest Cap'n Proto frame (a bucket's descriptor list).
inline constexpr size_t k_max_message_bytes = size_t(16) << 20;
/// Largest data frame (one chunk); also the largest bucket a client may send.
inline constexpr uint64_t k_max_chunk_bytes = uint64_t(1) << 30;
inline constexpr size_t k_max_chunks_per_bucket = 65536;
inline constexpr size_t k_max_name_bytes = 1024;
inline constexpr size_t k_max_rank = 8;

/// Bytes of a cudaIpcMemHandle_t (Chunk.ipcHandle).
inline constexpr size_t k_ipc_handle_bytes = 64;
/// Bytes of an ncclUniqueId (Begin.ncclUniqueId).
inline constexpr size_t k_nccl_id_bytes = 128;

struct begin_msg {
  begin_msg() = default;
  /// An update whose tensors all come in data frames (or by CUDA IPC).
  begin_msg(uint64_t version_, uint64_t n_tensors_, uint64_t total_bytes_)
      : version(version_), n_tensors(n_tensors_), total_bytes(total_bytes_) {}

  uint64_t version = 0;
  uint64_t n_tensors = 0;
  uint64_t total_bytes = 0;
  /// Set: chunks marked nccl come by broadcast in the NCCL group of this id (the server is rank 1 of 2).
  std::vector<uint8_t> nccl_id;
  bool nccl_reuse = false;  ///< the group is open from an earlier update
};

struct chunk_desc {
  chunk_desc() = default;
  /// A chunk whose bytes come in a data frame.
  chunk_desc(std::string name_, dtype type_, std::vector<int64_t> shape_, uint64_t byte_offset_,
             uint64_t n_bytes_)
      : name(std::move(name_)),
        type(type_),
        shape(std::move(shape_)),
        byte_offset(byte_offset_),
        n_bytes(n_bytes_) {}

  std::string name;
  dtype type = dtype::bf16;
  std::vector<int64_t> shape;
  uint64_t byte_offset = 0;
  uint64_t n_bytes = 0;
  /// Set: the bytes are in the sender's CUDA allocation this handle names, at
  /// ipc_offset, instead of a data frame (a trainer on the server's host).
  std::vector<uint8_t> ipc_handle;
  uint64_t ipc_offset = 0;
  /// Set: the bytes come by ncclBroadcast from rank 0 of the update's NCCL group.
  bool nccl = false;
  /// The bytes stay in the sender's CUDA memory (IPC or NCCL): no data frame.
  bool in_cuda_memory() const { return !ipc_handle.empty() || nccl; }
};

struct bucket_msg {
  uint64_t version = 0;
  uint64_t seq = 0;
  std::vector<chunk_desc> chunks;
};

struct end_msg {
  uint64_t version = 0;
  uint32_t crc32c = 0;
  uint64_t n_buckets =
      0;  ///< buckets the update carried; 0 = not stated (all sent before end on one connection)
};

struct abort_msg {
  uint64_t version = 0;
};

using sync_request = std::variant<begin_msg, bucket_msg, end_msg, abort_msg>;

enum class sync_phase : uint8_t { begin, bucket, end, abort, frame };
const char* sync_phase_name(sync_phase p);

struct sync_reply {
  uint64_t version = 0;
  sync_phase phase = sync_phase::frame;
  uint64_t seq = 0;
  status_code code = status_code::ok;  ///< ok = ack
  std::string message;
  uint64_t serving_version = 0;
  uint64_t bytes_received = 0;
  uint64_t build_us = 0;
  uint64_t swap_us = 0;

  bool ok() const { return code == status_code::ok; }
  status to_status() const;
};

}  // namespace hart::weight_sync
