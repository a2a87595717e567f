// File: kernels/testing/op_check_util.h — internal to the op checks: device
// buffers whose failures are statuses (no GTest in the CLI), and the
// element-wise comparison that makes an op_check_line.
#pragma once

#ifdef HART_CUDA

#include "kernels/testing/op_checks.h"
#include "runtime/core/status.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hart::op_check_detail {

/// A non-ok status naming `what` when e is an error.
status cuda_status(const char* what, cudaError_t e);

/// Device copy of a host vector (at least one element, so never null).
template <class T>
class dev {
 public:
  explicit dev(const std::vector<T>& host) : n_(host.size()) {
    err_ = cudaMalloc(reinterpret_cast<void**>(&p_), (n_ ? n_ : 1) * sizeof(T));
    if (err_ == cudaSuccess && n_) err_ = cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~dev() { cudaFree(p_); }
  dev(const dev&) = delete;
  dev& operator=(const dev&) = delete;
  T* get() const { return p_; }
  status ok() const { return cuda_status("device buffer", err_); }
  status to_host(std::vector<T>& host) const {
    host.resize(n_);
    return cuda_status(
        "copy back", n_ ? cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) : cudaSuccess);
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
  cudaError_t err_ = cudaSuccess;
};

/// got vs want: element i passes when |got - want| <= atol + rtol·scale[i] (NaN
/// and Inf must match exactly); max_rel is max |got - want| / scale[i].
op_check_line compare(std::string op, std::string shape, const std::vector<float>& got,
                      const std::vector<double>& want, const std::vector<double>& scale, double rtol,
                      double atol, std::string tol_text);

/// got vs want bit for bit (any two NaNs match, whatever their payload): the
/// rule of the integer-ported codecs. max_abs is max |got - want|, max_rel that
/// over |want|; tol text "exact (bits)".
op_check_line compare_bits(std::string op, std::string shape, const std::vector<float>& got,
                           const std::vector<float>& want);

/// Codes (e4m3 / e2m1 bytes, e8m0 scale codes) byte for byte: max_abs counts the
/// mismatching bytes, max_rel is their fraction; tol text "exact (codes)".
op_check_line compare_codes(std::string op, std::string shape, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& want);

/// A generator for one op's inputs: the run's seed mixed with the op name, so
/// ops draw independent inputs and one op replays alone with the same seed.
std::mt19937 op_rng(uint32_t seed, const char* op);

/// n values from N(0, sigma²).
std::vector<float> normal(std::mt19937& rng, size_t n, float sigma);

// The checks registered in op_checks.cpp, one per file in checks/.
status check_rms_norm(uint32_t seed, std::vector<op_check_line>& lines);
status check_lightning_topk(uint32_t seed, std::vector<op_check_line>& lines);
status check_linear(uint32_t seed, std::vector<op_check_line>& lines);
status check_sparse_attention(uint32_t seed, std::vector<op_check_line>& lines);
status check_swiglu(uint32_t seed, std::vector<op_check_line>& lines);
status check_rope(uint32_t seed, std::vector<op_check_line>& lines);
status check_quant(uint32_t seed, std::vector<op_check_line>& lines);
status check_mhc(uint32_t seed, std::vector<op_check_line>& lines);
status check_moe_route(uint32_t seed, std::vector<op_check_line>& lines);
status check_flash_compressor(uint32_t seed, std::vector<op_check_line>& lines);
status check_indexer(uint32_t seed, std::vector<op_check_line>& lines);
status check_sparse_decode_attention(uint32_t seed, std::vector<op_check_line>& lines);

}  // namespace hart::op_check_detail

#endif  // HART_CUDA
