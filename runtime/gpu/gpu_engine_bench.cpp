// gpu_engine's entry points for `hart bench` (cli/cmd_bench.cpp).
#include "kernels/sparse_decode_attention/kv_entry.h"
#include "runtime/gpu/bench_fill.h"
#include "runtime/gpu/device_memory.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_engine_impl.h"

#include <cuda_runtime.h>

#include <vector>

namespace hart {
namespace {

// Every window-KV and compressed-entry row of the pool as an FP8 entry of
// random values (raw random floats would read as NaN codes and huge scales):
// 4096 random source rows, encoded round-robin into the rows' offsets.
status fill_entries(const gpu::engine_state& s, uint64_t seed) {
  const gpu::kv_pool& pool = s.pool;
  const int64_t P = pool.page_size(), hd = s.cfg.head_dim, n_src = 4096;
  std::vector<int64_t> dst, src;
  for (int64_t il = 0; il < s.cfg.n_layers; ++il) {
    for (int32_t pg = 0; pg < pool.n_swa(); ++pg) {
      for (int64_t off = 0; off < P; ++off) dst.push_back(pool.window(il, pg, off));
    }
    if (s.cfg.layer_kinds[il] == attention_kind::sliding) continue;
    const int64_t m = s.cfg.compress_rate(s.cfg.layer_kinds[il]);
    for (int32_t pg = 0; pg < pool.n_full(); ++pg) {
      for (int64_t off = 0; off < P; off += m) dst.push_back(pool.entry(il, pg, off));
    }
  }
  src.resize(dst.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = int64_t(i % n_src) * hd;
  const size_t off_bytes = dst.size() * sizeof(int64_t);
  HART_ASSIGN_OR_RETURN(gpu::device_buffer rows, gpu::device_buffer::create(n_src * hd * sizeof(float)));
  HART_ASSIGN_OR_RETURN(gpu::device_buffer offs, gpu::device_buffer::create(2 * off_bytes));
  float* d_rows = static_cast<float*>(rows.get());
  int64_t* d_dst = static_cast<int64_t*>(offs.get());
  int64_t* d_src = d_dst + dst.size();
  HART_RETURN_IF_ERROR(gpu::bench_fill_f32(d_rows, n_src * hd, seed ^ 0x9e3779b9u, -1.0f, 1.0f, s.stream));
  HART_RETURN_IF_ERROR(
      gpu::cuda_status(cudaMemcpy(d_dst, dst.data(), off_bytes, cudaMemcpyHostToDevice), "kv fill"));
  HART_RETURN_IF_ERROR(
      gpu::cuda_status(cudaMemcpy(d_src, src.data(), off_bytes, cudaMemcpyHostToDevice), "kv fill"));
  HART_RETURN_IF_ERROR(
      kv_entry_encode_rows_cuda({d_rows, d_src, pool.base(), d_dst, int64_t(dst.size())}, s.stream));
  // The buffers go when this returns: finish with them first.
  return gpu::cuda_status(cudaStreamSynchronize(s.stream), "gpu engine: kv_fill_random");
}

}  // namespace

status gpu_engine::kv_fill_random(uint64_t seed) const {
  const int64_t n = int64_t(s_->pool.bytes() / sizeof(float));
  HART_RETURN_IF_ERROR(gpu::bench_fill_f32(s_->pool.base(), n, seed, -1.0f, 1.0f, s_->stream));
  if (s_->kv_entries) HART_RETURN_IF_ERROR(fill_entries(*s_, seed));
  return gpu::cuda_status(cudaStreamSynchronize(s_->stream), "gpu engine: kv_fill_random");
}

}  // namespace hart
