// File: runtime/weight_sync/staging.h
// One weight update being received: begin → buckets of chunks → finish. It
// checks what arrives against what begin announced (tensor count, total
// bytes), that a tensor's chunks agree on dtype and shape and neither overlap
// nor leave a gap (they may arrive in any order: a client sends buckets over
// several connections), that buckets 0..n-1 each came once, and the CRC-32C
// over every chunk's bytes in bucket order (each bucket's CRC combined). Any error discards the whole
// update (staging freed); finish hands over a tensor_source for the engine to
// build from. The buffers of a finished update are kept: the next update's
// tensors of the same name and size are received into them in place (no
// allocation, no page faults: RL pushes the same shapes every step) once the
// engine has dropped the previous source. Not thread-safe: one owner (the
// weight-sync actor).
//
//   update_staging st(limits);
//   HART_RETURN_IF_ERROR(st.begin(b, serving_version));
//   HART_RETURN_IF_ERROR(st.begin_bucket(version, seq));  // per bucket, then
//   HART_RETURN_IF_ERROR(st.add(version, chunk, bytes));   // per chunk of it, in list order
//   HART_ASSIGN_OR_RETURN(auto src, st.finish(end));
#pragma once

#include "runtime/model/tensor_source.h"
#include "runtime/weight_sync/crc_pool.h"
#include "runtime/weight_sync/cuda_ipc.h"
#include "runtime/weight_sync/nccl_group.h"
#include "runtime/weight_sync/staged_source.h"
#include "runtime/weight_sync/sync_messages.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hart::weight_sync {

struct staging_limits {
  uint64_t max_total_bytes = uint64_t(1) << 40;  ///< an update larger than this is refused at begin
  uint64_t max_tensors = uint64_t(1) << 20;
  int copy_threads = 0;  ///< threads staging a frame (CRC + copy); 0 = crc_pool_default_threads()
};

class update_staging {
 public:
  explicit update_staging(staging_limits limits = {})
      : limits_(limits),
        copier_(limits.copy_threads > 0 ? limits.copy_threads : crc_pool_default_threads()) {}

  /// Opens update `m.version`, discarding one already staged (its buffers are
  /// kept for reuse). failed_precondition unless m.version > serving_version;
  /// invalid_argument / resource_exhausted for counts over the limits. On
  /// error nothing is staged.
  status begin(const begin_msg& m, uint64_t serving_version);
  /// Opens bucket `seq` of the staged update (its chunks follow through add).
  /// failed_precondition when `version` is not staged; invalid_argument (the
  /// update discarded) for a seq already received.
  status begin_bucket(uint64_t version, uint64_t seq);
  /// Stages one chunk's bytes into the open bucket. failed_precondition when
  /// `version` is not the staged update or no bucket is open; invalid_argument
  /// for a chunk that disagrees with the tensor's earlier chunks, overlaps one,
  /// or exceeds the announced size (then the update is discarded).
  status add(uint64_t version, const chunk_desc& c, const void* bytes);
  /// As add, for a chunk in the sender's CUDA memory (c.ipc_handle set):
  /// copied out through `ipc`, not checksummed. Its errors discard the update.
  status add_from_cuda(uint64_t version, const chunk_desc& c, cuda_ipc_reader& ipc);
  /// As add, for a chunk broadcast by NCCL (c.nccl): received through `group`,
  /// the update's (failed_precondition when it opened none: null), not
  /// checksummed. Its errors discard the update.
  status add_by_nccl(uint64_t version, const chunk_desc& c, nccl_group* group);
  /// Ends the update (always: no update is staged afterwards). data_loss for a
  /// checksum mismatch; invalid_argument for missing bytes, tensors or buckets
  /// (m.n_buckets when stated; buckets 0..n-1 always) (then the staging memory is freed). On success the
  /// source shares the buffers the staging keeps for the next update.
  status_or<std::unique_ptr<tensor_source>> finish(const end_msg& m);
  /// Drops the staged update, if any, and frees every staging buffer.
  void discard();
  /// Host bytes held by staging buffers: the update's, and those kept from the
  /// last finished one (only its tensors: a finish frees buffers it did not use).
  uint64_t staged_bytes() const;

  bool active() const { return active_; }
  uint64_t version() const { return version_; }
  uint64_t bytes_received() const { return bytes_; }
  uint64_t buckets_received() const { return buckets_.size(); }

 private:
  struct pending_tensor {
    dtype type = dtype::bf16;
    std::vector<int64_t> shape;
    std::shared_ptr<staged_buffer> buffer;  // sized on the first chunk
    uint64_t received = 0;
    std::map<uint64_t, uint64_t> ranges;  // received [offset, offset + length), adjacent ones merged
  };
  struct bucket_sum {
    uint32_t crc = 0;  // of the bucket's chunks in list order
    uint64_t bytes = 0;
  };

  status fail(status s);
  /// Checks chunk c against the update and its tensor, records its range, and
  /// returns where its bytes go (the errors of add).
  status_or<uint8_t*> place(uint64_t version, const chunk_desc& c);
  /// Ends the update's bookkeeping; keeps the buffers in `kept_`.
  void reset();
  /// A buffer of n bytes for `name`: the kept one when its size matches and no source still reads it.
  status_or<std::shared_ptr<staged_buffer>> buffer_for(const std::string& name, uint64_t n);

  staging_limits limits_;
  bool active_ = false;
  uint64_t version_ = 0;
  begin_msg announced_;
  uint64_t bytes_ = 0;                      // received
  uint64_t allocated_ = 0;                  // sum of the sizes of the tensors seen so far
  std::map<uint64_t, bucket_sum> buckets_;  // by seq
  bucket_sum* open_ = nullptr;              // the bucket add() stages into
  std::map<std::string, pending_tensor> tensors_;
  std::map<std::string, std::shared_ptr<staged_buffer>> kept_;  // by tensor name, from earlier updates
  crc_pool copier_;  // stages each frame: CRC + copy split over threads
};

}  // namespace hart::weight_sync
