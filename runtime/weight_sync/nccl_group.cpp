#include "runtime/weight_sync/nccl_group.h"

#include "runtime/weight_sync/sync_messages.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <thread>

namespace hart::weight_sync {

static_assert(sizeof(ncclUniqueId) == k_nccl_id_bytes, "the wire's NCCL id size");

namespace {

using steady = std::chrono::steady_clock;

// Rank 0 enqueues ahead of the server; past this many broadcasts in flight it
// waits for its stream, so a stalled server never blocks it in a kernel launch
// (CUDA's launch queue is finite), where no timeout could reach it.
constexpr int k_max_pending = 128;

status nccl_status(ncclResult_t r, ncclComm_t comm, const char* what) {
  std::string msg = std::string("weight sync by NCCL: ") + what + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += std::string(" (") + last + ")";
  // Invalid usage: e.g. both ranks on one GPU. The rest is the other rank or the link failing.
  const status_code code = r == ncclInvalidArgument || r == ncclInvalidUsage ? status_code::invalid_argument
                                                                             : status_code::unavailable;
  return status(code, msg);
}

status cuda_status(cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  return internal_error("weight sync by NCCL: %s: %s", what, cudaGetErrorString(e));
}

// The group's device for the calls of one method; the caller's current device afterwards (a
// trainer's thread may work on another).
class device_scope {
 public:
  explicit device_scope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    set_ = cudaSetDevice(device);
  }
  ~device_scope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  cudaError_t error() const { return set_; }

 private:
  int previous_ = -1;
  cudaError_t set_ = cudaSuccess;
};

}  // namespace

struct nccl_group::state {
  std::vector<uint8_t> id;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* buffer = nullptr;  // receive() lands each broadcast here
  size_t buffer_bytes = 0;
  int pending = 0;  // broadcasts enqueued since the stream last drained
};

status nccl_group::usable(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
    (void)cudaGetLastError();
    return status(status_code::unavailable,
                  "weight sync by NCCL: no CUDA device " + std::to_string(device) + " here");
  }
  return {};
}

status_or<std::vector<uint8_t>> nccl_group::new_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return nccl_status(r, nullptr, "ncclGetUniqueId");
  }
  return std::vector<uint8_t>(id.internal, id.internal + k_nccl_id_bytes);
}

status_or<int> nccl_group::device_of(const void* device_ptr) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, device_ptr) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return invalid_argument("weight sync: %p is not CUDA device memory of this process", device_ptr);
  }
  return a.device;
}

nccl_group::nccl_group() = default;
nccl_group::~nccl_group() {
  close();
}

status nccl_group::join(const std::vector<uint8_t>& id, int rank, int world, int device,
                        std::chrono::milliseconds timeout) {
  close();
  if (id.size() != k_nccl_id_bytes) {
    return invalid_argument("weight sync by NCCL: unique id of %zu bytes, expected %zu", id.size(),
                            k_nccl_id_bytes);
  }
  if (world < 2 || rank < 0 || rank >= world)
    return invalid_argument("weight sync by NCCL: rank %d of %d", rank, world);
  HART_RETURN_IF_ERROR(usable(device));
  auto s = std::make_unique<state>();
  s->id = id;
  s->device = device;
  s->timeout = timeout;
  const device_scope on(device);
  if (on.error() != cudaSuccess) return cuda_status(on.error(), "cudaSetDevice");
  // Rank 0 reads the caller's tensors: its stream runs after the legacy default
  // stream's earlier work (where they were most likely written). The server's
  // stays apart from the engine's.
  const unsigned flags = rank == 0 ? cudaStreamDefault : cudaStreamNonBlocking;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&s->stream, flags); e != cudaSuccess) {
    return cuda_status(e, "cudaStreamCreate");
  }
  s_ = std::move(s);
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), k_nccl_id_bytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // the init and every call return at once; wait() bounds how long they take
  const ncclResult_t r = ncclCommInitRankConfig(&s_->comm, world, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    return fail(nccl_status(r, s_->comm, "ncclCommInitRankConfig"));
  return {};
}

bool nccl_group::joined(const std::vector<uint8_t>& id, int device) const {
  if (!s_ || s_->id != id || s_->device != device) return false;
  ncclResult_t async = ncclInProgress;
  return ncclCommGetAsyncError(s_->comm, &async) == ncclSuccess && async == ncclSuccess;
}

status nccl_group::broadcast(const void* src, size_t n, const std::function<status()>& check) {
  if (!s_) return failed_precondition("weight sync by NCCL: no group is open");
  const device_scope on(s_->device);
  if (on.error() != cudaSuccess) return fail(cuda_status(on.error(), "cudaSetDevice"));
  HART_RETURN_IF_ERROR(wait(s_->pending >= k_max_pending, check));
  // In place on the root (recvbuff == sendbuff): nothing is written to the caller's tensor.
  const ncclResult_t r = ncclBroadcast(src, const_cast<void*>(src), n, ncclUint8, 0, s_->comm, s_->stream);
  if (r != ncclSuccess && r != ncclInProgress) return fail(nccl_status(r, s_->comm, "ncclBroadcast"));
  ++s_->pending;
  return {};
}

status nccl_group::drain(const std::function<status()>& check) {
  if (!s_) return failed_precondition("weight sync by NCCL: no group is open");
  return wait(true, check);
}

status nccl_group::receive(void* dst, size_t n) {
  if (!s_) return failed_precondition("weight sync by NCCL: no group is open");
  const device_scope on(s_->device);
  if (on.error() != cudaSuccess) return fail(cuda_status(on.error(), "cudaSetDevice"));
  if (s_->buffer_bytes < n) {
    if (s_->buffer) cudaFree(s_->buffer);
    s_->buffer = nullptr;
    s_->buffer_bytes = 0;
    if (cudaMalloc(&s_->buffer, n) != cudaSuccess) {
      (void)cudaGetLastError();
      return fail(
          resource_exhausted("weight sync by NCCL: no device memory for a %zu-byte receive buffer", n));
    }
    s_->buffer_bytes = n;
  }
  HART_RETURN_IF_ERROR(wait(false, {}));  // the init (the trainer joins after the begin's ack)
  const ncclResult_t r = ncclBroadcast(s_->buffer, s_->buffer, n, ncclUint8, 0, s_->comm, s_->stream);
  if (r != ncclSuccess && r != ncclInProgress) return fail(nccl_status(r, s_->comm, "ncclBroadcast"));
  HART_RETURN_IF_ERROR(wait(true, {}));
  // Only now: a copy to pageable memory blocks the thread until it is done, with no timeout.
  cudaError_t e = cudaMemcpyAsync(dst, s_->buffer, n, cudaMemcpyDeviceToHost, s_->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s_->stream);
  if (e != cudaSuccess) return fail(cuda_status(e, "copy to the staging"));
  return {};
}

status nccl_group::wait(bool drain, const std::function<status()>& check) {
  const auto deadline = steady::now() + s_->timeout;
  for (;;) {
    ncclResult_t async = ncclSuccess;
    if (const ncclResult_t r = ncclCommGetAsyncError(s_->comm, &async); r != ncclSuccess) async = r;
    if (async != ncclSuccess && async != ncclInProgress)
      return fail(nccl_status(async, s_->comm, "the group failed"));
    if (async == ncclSuccess) {
      if (!drain) return {};
      const cudaError_t e = cudaStreamQuery(s_->stream);
      if (e == cudaSuccess) {
        s_->pending = 0;
        return {};
      }
      if (e != cudaErrorNotReady) return fail(cuda_status(e, "broadcast"));
    }
    if (check) {
      if (status c = check(); !c.ok()) return fail(c);
    }
    if (steady::now() > deadline) {
      return fail(
          status(status_code::unavailable,
                 "weight sync by NCCL: no progress within " + std::to_string(s_->timeout.count()) +
                     " ms (the other rank did not join the group, or stopped broadcasting); group aborted"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

status nccl_group::fail(status s) {
  close();
  return s;
}

void nccl_group::close() {
  if (!s_) return;
  const device_scope on(s_->device);
  // Abort, not finalize: it needs no other rank, and it ends a broadcast in flight.
  if (s_->comm) ncclCommAbort(s_->comm);
  if (s_->stream) {
    (void)cudaStreamSynchronize(s_->stream);  // rank 0: nothing reads the caller's tensors any more
    cudaStreamDestroy(s_->stream);
  }
  if (s_->buffer) cudaFree(s_->buffer);
  (void)cudaGetLastError();
  s_.reset();
}

}  // namespace hart::weight_sync
