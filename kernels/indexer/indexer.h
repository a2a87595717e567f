// File: kernels/indexer/indexer.h — the Lightning Indexer's scores and top-k
// (v4-model.md §4.5): score[s] = Σ_h w[h] · ReLU(q_h · k_s) · softmax_scale,
// then the k best visible entries, ties broken by the lowest index.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct indexer_score_params {
  const float* q = nullptr;     // [head_dim, n_heads] one query
  const float* w = nullptr;     // [n_heads] head weights (weights_proj · n_heads^-0.5)
  const float* keys = nullptr;  // [head_dim, n_keys] compressed indexer keys
  float* score = nullptr;       // [n_keys]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_keys = 0;
  float softmax_scale = 1.0f;  // head_dim^-0.5
  /// The official inference's bf16 tensors: each q·k, each relu(q·k)·w and the
  /// sum over heads rounded to bf16. It folds the softmax scale into w (pass 1).
  bool bf16 = false;
};

struct topk_params {
  const float* values = nullptr;  // [n]
  int32_t* indices = nullptr;     // [k] out: best first; positions past min(k, n) are -1
  int64_t n = 0;
  int64_t k = 0;
  /// Which of several equal values win. false: the lowest index (deterministic,
  /// what the CUDA kernels do). true: the same set torch.topk picks on CPU
  /// (libstdc++ introselect / partial_sort over (value, index) pairs), which
  /// exact mode needs to match the reference where ReLU scores tie at exactly 0.
  bool torch_order = false;
};

status indexer_score_cpu(const indexer_score_params& p);
/// Largest `k` of `values`, best first (NaN never selected); ties per `torch_order`.
status topk_cpu(const topk_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// indexer_score_cpu's contract on the device, for a pass's tokens in one
/// launch straight from a paged key store (the engine's KV pool; no
/// allocation, no synchronisation; the top-k is lightning_topk_cuda): token t
/// scores its first lengths[t] keys, key i at
/// keys + pages[page_base[t] + i·rate / page_size] · page_floats + key_off +
/// (i·rate % page_size) / rate · head_dim (one key per `rate` positions,
/// page_size positions per page), into score[t · score_stride + i]. Each
/// score is bitwise the CPU's on the same key (the same fp32 operations in the
/// same order, bf16 roundings included).
struct indexer_score_paged_params {
  const float* q = nullptr;            // [n_tokens][n_heads][head_dim]
  const float* w = nullptr;            // [n_tokens][n_heads]
  const float* keys = nullptr;         // the key store's base
  const int32_t* lengths = nullptr;    // [n_tokens] visible keys, each <= max_keys
  const int32_t* page_base = nullptr;  // [n_tokens] first entry of the token's page list in `pages`
  const int32_t* pages = nullptr;
  float* score = nullptr;  // [n_tokens][score_stride]
  int64_t n_tokens = 0, n_heads = 0, head_dim = 0;
  int64_t max_keys = 0;  // the grid's keys per token (>= every length)
  int64_t score_stride = 0;
  int64_t rate = 0, page_size = 0, page_floats = 0, key_off = 0;
  float softmax_scale = 1.0f;
  bool bf16 = false;  // indexer_score_params::bf16 (pass softmax_scale 1)
};
status indexer_score_paged_cuda(const indexer_score_paged_params& p, CUstream_st* stream);
}  // namespace hart
#endif
