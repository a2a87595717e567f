// File: rollout/weight_sync_client.h
// The trainer side of weight sync (docs/protocol.md §8): push a full set of
// named tensors — raw bytes, dtype (BF16, F16, F32; I32/I64 tables), shape —
// into a running `hart serve --weight-sync-endpoint EP` as weight version N.
// Tensors are packed into buckets of about `bucket_bytes` (a larger tensor is
// split across buckets), sent without copying the caller's bytes over one or
// more connections (`lanes`), and checksummed (CRC-32C). Tensors in CUDA
// memory (`tensor_ref::device`) go another way (`device_via`): by CUDA IPC,
// the server on the same host copying them out of this process's allocation,
// or by NCCL broadcast from this GPU to the server's (another GPU of this
// host, or of another host): the client forms a two-rank NCCL group with the
// server on its first such push and reuses it while pushes succeed (any error
// closes it on both sides; the next push forms a new one), sends every bucket
// over one connection and broadcasts each chunk right after its bucket,
// straight from the tensor's memory. push returns once the server has swapped
// the new weights in, or with the server's typed error (the old version keeps
// serving). No LibTorch here: pass `tensor.data_ptr()`, `tensor.nbytes()` and
// `tensor.is_cuda()` of contiguous tensors.
//
//   auto c = weight_sync_client::connect({"tcp://127.0.0.1:5558"});
//   std::vector<tensor_ref> ts = {{"model.embed_tokens.weight", dtype::bf16, {V, D}, ptr, V * D * 2}, ...};
//   status_or<push_report> r = c.value()->push(step, ts);   // r->gb_per_s
#pragma once

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hart {

/// How tensors in CUDA memory (tensor_ref::device) reach the server.
enum class device_transport {
  cuda_ipc,  ///< the server, on this host, copies them out of this process's allocations
  nccl,      ///< broadcast from their GPU to the server's (another GPU; NCCL on both sides)
};

struct weight_sync_client_params {
  std::string endpoint = "tcp://127.0.0.1:5558";
  std::string curve_server_key{};  ///< the server's Z85 public key; enables CURVE
  std::string
      curve_secret_key{};  ///< this client's Z85 secret key (its public key derived); a fresh pair when empty
  uint64_t bucket_bytes =
      uint64_t(128) << 20;  ///< tensor bytes per bucket, 1 .. 1 GiB (several per lane keep the lanes busy)
  /// Largest data frame (a tensor is cut into chunks of at most this). Frames
  /// the server's allocator can recycle (below glibc's 32 MiB mmap ceiling)
  /// arrive without page faults; docs/perf-notes.md W1 v2.
  uint64_t frame_bytes = uint64_t(4) << 20;
  /// Longest wait for one reply (the end reply includes building and swapping the weights),
  /// and for a connection to send on: a server that is not there or refuses this client's
  /// CURVE key fails the push with unavailable after it (1 ms .. INT_MAX ms).
  std::chrono::milliseconds reply_timeout{600000};
  /// Threads checksumming each frame before it is sent (the caller's
  /// included); 0 = a quarter of the cores, 1 to 4.
  int crc_threads = 0;
  /// Connections the buckets go over, round robin (the server receives each
  /// on its own thread: one connection's receive copy bounds a push at ~3
  /// GB/s); 0 = a quarter of the cores, 1 to 4. A push by NCCL uses one: both
  /// sides must see the buckets in one order.
  int lanes = 0;
  /// For tensors in CUDA memory. NCCL: they must all be on one device, other
  /// than the server's, and `reply_timeout` also bounds each wait on the group
  /// (its forming, a broadcast the server does not take).
  device_transport device_via = device_transport::cuda_ipc;

  status validate() const;
};

/// One tensor to send. `data` must stay valid and unchanged until push returns.
struct tensor_ref {
  std::string name;  ///< official or Hugging Face spelling
  dtype type = dtype::bf16;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t n_bytes = 0;  ///< numel × dtype size
  /// `data` is CUDA device memory of this process (cudaMalloc'd, e.g. a LibTorch
  /// CUDA tensor's data_ptr()): it goes by CUDA IPC or NCCL (`device_via`)
  /// instead of over the socket (no checksum: the bytes cross no socket).
  /// Needs a CUDA build on both sides (with NCCL for NCCL). Its bytes must be
  /// final: NCCL reads them after the legacy default stream's earlier work
  /// (LibTorch's default stream), work on other streams must be synchronized.
  bool device = false;
};

struct push_report {
  uint64_t version = 0;
  int64_t n_tensors = 0;
  uint64_t n_bytes = 0;
  int64_t n_buckets = 0;
  uint32_t crc32c = 0;
  double transfer_s = 0;           ///< begin sent → end answered, less the server's build and swap time
  double total_s = 0;              ///< begin sent → new weights serving
  double build_s = 0;              ///< server: re-quantizing / building the weights
  double swap_s = 0;               ///< server: waiting for a step boundary and swapping
  double gb_per_s = 0;             ///< n_bytes / transfer_s, 1e9 bytes
  bool nccl_group_formed = false;  ///< this push formed the NCCL group (a later one reuses it)
};

class weight_sync_client {
 public:
  static status_or<std::unique_ptr<weight_sync_client>> connect(const weight_sync_client_params& params);
  ~weight_sync_client();
  weight_sync_client(const weight_sync_client&) = delete;
  weight_sync_client& operator=(const weight_sync_client&) = delete;

  /// Sends every tensor as version `version` and waits for the swap.
  /// invalid_argument for a bad tensor_ref (nothing is sent); otherwise the
  /// server's error (failed_precondition: version not above the serving one;
  /// data_loss: checksum; not_found / invalid_argument: a missing or
  /// mis-shaped tensor), or unavailable when no reply comes in time.
  status_or<push_report> push(uint64_t version, const std::vector<tensor_ref>& tensors);

  struct impl;

 private:
  explicit weight_sync_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace hart
