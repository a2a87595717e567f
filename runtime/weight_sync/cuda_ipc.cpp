#include "runtime/weight_sync/cuda_ipc.h"

#include "kernels/cuda_device.h"
#include "runtime/weight_sync/sync_messages.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>

namespace hart::weight_sync {

static_assert(sizeof(cudaIpcMemHandle_t) == k_ipc_handle_bytes, "the wire's handle size");

namespace {

// cuMemGetAddressRange through the runtime (cuda_driver_symbol).
CUresult address_range(CUdeviceptr* base, size_t* bytes, CUdeviceptr p) {
  using fn_t = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const fn_t fn = reinterpret_cast<fn_t>(cuda_driver_symbol("cuMemGetAddressRange"));
  return fn ? fn(base, bytes, p) : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

status_or<cuda_ipc_ref> cuda_ipc_export(const void* device_ptr) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, device_ptr) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return invalid_argument("weight sync: %p is not CUDA device memory of this process", device_ptr);
  }
  // An IPC handle names a whole allocation: find the one the pointer lies in.
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (address_range(&base, &bytes, CUdeviceptr(device_ptr)) != CUDA_SUCCESS) {
    return invalid_argument("weight sync: no CUDA allocation holds %p", device_ptr);
  }
  cudaIpcMemHandle_t h;
  if (const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)); e != cudaSuccess) {
    return invalid_argument(
        "weight sync: cudaIpcGetMemHandle: %s (memory from cudaMalloc can be shared, "
        "not managed or pooled allocations)",
        cudaGetErrorString(e));
  }
  cuda_ipc_ref r;
  r.handle.resize(k_ipc_handle_bytes);
  std::memcpy(r.handle.data(), &h, k_ipc_handle_bytes);
  r.offset = uint64_t(CUdeviceptr(device_ptr) - base);
  r.allocation_bytes = bytes;
  return r;
}

status cuda_ipc_reader::read(const std::vector<uint8_t>& handle, uint64_t offset, void* dst, size_t n) {
  if (handle.size() != k_ipc_handle_bytes)
    return invalid_argument("weight sync: CUDA IPC handle of %zu bytes", handle.size());
  auto it = opened_.find(handle);
  if (it == opened_.end()) {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), k_ipc_handle_bytes);
    opened o;
    if (const cudaError_t e = cudaIpcOpenMemHandle(&o.base, h, cudaIpcMemLazyEnablePeerAccess);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return status(status_code::unavailable,
                    std::string("weight sync: the sender's CUDA allocation does not open here (") +
                        cudaGetErrorString(e) +
                        "; CUDA IPC needs the trainer on this host, its allocation alive)");
    }
    CUdeviceptr b = 0;
    size_t bytes = 0;
    if (address_range(&b, &bytes, CUdeviceptr(o.base)) != CUDA_SUCCESS) bytes = 0;
    o.bytes = bytes;
    it = opened_.emplace(handle, o).first;
  }
  if (offset > it->second.bytes || n > it->second.bytes - offset) {
    return out_of_range("weight sync: bytes [%llu, +%zu) past the sender's CUDA allocation of %llu bytes",
                        (unsigned long long)offset, n, (unsigned long long)it->second.bytes);
  }
  const cudaError_t e =
      cudaMemcpy(dst, static_cast<const char*>(it->second.base) + offset, n, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error("weight sync: copy out of the sender's CUDA memory: %s", cudaGetErrorString(e));
  }
  return {};
}

void cuda_ipc_reader::close() {
  for (auto& [h, o] : opened_) cudaIpcCloseMemHandle(o.base);
  opened_.clear();
}

}  // namespace hart::weight_sync
