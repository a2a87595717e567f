// File: runtime/weight_sync/nccl_group.h
// Weight-sync chunks by NCCL broadcast (weight_sync.capnp Begin.ncclUniqueId,
// Chunk.nccl): the trainer (rank 0, its tensors on another GPU) and the
// server (rank 1) form a two-rank communicator, and each such chunk is one
// ncclBroadcast from rank 0, called by both in the same order (list order in
// a bucket, buckets in seq order). The communicator is non-blocking and every
// wait is bounded by the group's timeout: a rank that does not join or stops
// broadcasting is caught, the communicator aborted (ncclCommAbort ends a
// broadcast in flight) and the error returned, so a dead trainer never hangs
// the server. In a build without NCCL (HART_NCCL off) everything answers
// unimplemented.
//
//   trainer (rank 0)                                     server (rank 1)
//   id = new_id(); send begin {id}             ───────▶  g.join(id, 1, 2, dev, t); ack
//   g.join(id, 0, 2, dev, t)                             (the init finishes in the background)
//   send bucket; g.broadcast(p, n) per chunk   ───────▶  g.receive(staging, n) per chunk
//   g.drain(); send end
#pragma once

#include "runtime/core/status.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace hart::weight_sync {

class nccl_group {
 public:
  /// ok where this build has NCCL and CUDA device `device` exists;
  /// unimplemented without NCCL, unavailable without the device.
  static status usable(int device);
  /// A fresh ncclUniqueId (k_nccl_id_bytes) for rank 0 to hand to the other ranks.
  static status_or<std::vector<uint8_t>> new_id();
  /// The CUDA device whose memory `device_ptr` is; invalid_argument for host memory.
  static status_or<int> device_of(const void* device_ptr);

  nccl_group();
  ~nccl_group();  ///< close()s
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;

  /// Closes any group this one holds and starts joining group `id` as `rank`
  /// of `world` on CUDA device `device`; returns without waiting for the
  /// others (the calls below wait for the init). `timeout` bounds each of
  /// their waits. invalid_argument for an id of another size.
  status join(const std::vector<uint8_t>& id, int rank, int world, int device,
              std::chrono::milliseconds timeout);
  /// Holds group `id` on `device`, formed and without an error so far.
  bool joined(const std::vector<uint8_t>& id, int device) const;

  /// Rank 0: enqueues the broadcast of n bytes of device memory at `src`,
  /// read in place until drained (after the legacy default stream's earlier
  /// work, where LibTorch writes by default). While it waits (for the init,
  /// or for the stream once many broadcasts are in flight) it calls `check`:
  /// an error from it (the server's) ends the wait and the group.
  status broadcast(const void* src, size_t n, const std::function<status()>& check = {});
  /// Rank 0: waits until every broadcast enqueued has completed.
  status drain(const std::function<status()>& check = {});
  /// The other ranks: receives the next broadcast of n bytes into host memory
  /// `dst`, through a device buffer the group keeps (as large as the largest
  /// chunk so far).
  status receive(void* dst, size_t n);
  /// Aborts the communicator (a broadcast in flight ends) and frees its
  /// buffers; the other ranks' next calls fail. No-op when none is held.
  void close();

 private:
  struct state;
  /// Waits for the communicator to finish its calls (with `drain`, for the
  /// stream too) within the timeout; closes the group on any failure.
  status wait(bool drain, const std::function<status()>& check);
  status fail(status s);
  std::unique_ptr<state> s_;
};

}  // namespace hart::weight_sync
