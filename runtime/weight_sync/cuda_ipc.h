// File: runtime/weight_sync/cuda_ipc.h
// Weight-sync chunks in CUDA memory (weight_sync.capnp Chunk.ipcHandle): a
// trainer on the server's host exports the allocation behind each tensor
// (cuda_ipc_export), the server copies the chunks out of it (cuda_ipc_reader)
// instead of receiving data frames. In a build without CUDA both answer
// unimplemented.
//
//   HART_ASSIGN_OR_RETURN(cuda_ipc_ref ref, cuda_ipc_export(tensor.data_ptr()));   // trainer
//   cuda_ipc_reader r;                                                              // server, per update
//   HART_RETURN_IF_ERROR(r.read(chunk.ipc_handle, chunk.ipc_offset, staging, n));
//   r.close();                                                                      // when the update ends
#pragma once

#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace hart::weight_sync {

/// Where a device pointer lives: its allocation's IPC handle, and its offset in it.
struct cuda_ipc_ref {
  std::vector<uint8_t> handle;  // k_ipc_handle_bytes
  uint64_t offset = 0;
  uint64_t allocation_bytes = 0;
};

/// invalid_argument for a pointer that is not CUDA device memory of this
/// process; unimplemented without CUDA.
status_or<cuda_ipc_ref> cuda_ipc_export(const void* device_ptr);

/// Opens each allocation once per update and keeps it open until close().
class cuda_ipc_reader {
 public:
  cuda_ipc_reader() = default;
  ~cuda_ipc_reader() { close(); }
  cuda_ipc_reader(const cuda_ipc_reader&) = delete;
  cuda_ipc_reader& operator=(const cuda_ipc_reader&) = delete;

  /// Copies n bytes at `offset` of the allocation `handle` names into host
  /// memory. unavailable when the handle does not open (another host, a freed
  /// allocation); out_of_range past the allocation; unimplemented without CUDA.
  status read(const std::vector<uint8_t>& handle, uint64_t offset, void* dst, size_t n);
  /// Closes what read() opened (the trainer may free it once its update ends).
  void close();

 private:
  struct opened {
    void* base = nullptr;
    uint64_t bytes = 0;
  };
  std::map<std::vector<uint8_t>, opened> opened_;
};

}  // namespace hart::weight_sync
