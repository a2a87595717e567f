#include "kernels/sparse_attention/sparse_attention.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hart {
namespace {

constexpr int64_t k_official_block = 64;  // slots per step of the official kernel's online softmax

void sparse_attention_official(const sparse_attention_params& p) {
  std::vector<float> acc(p.head_dim), prob(k_official_block);
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* q = p.q + h * p.head_dim;
    float m = -INFINITY, sum = 0;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < p.n_kv; b0 += k_official_block) {
      const int64_t n = std::min(k_official_block, p.n_kv - b0);
      float m_new = m;
      for (int64_t j = 0; j < n; ++j) {
        const float* k = p.kv[b0 + j];
        float s = -INFINITY;
        if (k) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
          s = dot * p.scale;
        }
        prob[j] = s;
        m_new = std::fmax(m_new, s);
      }
      if (m_new == -INFINITY) continue;  // every slot so far masked: nothing to add
      const float rescale = std::exp(m - m_new);
      float block_sum = 0;
      for (int64_t j = 0; j < n; ++j) block_sum += (prob[j] = std::exp(prob[j] - m_new));
      sum = sum * rescale + block_sum;
      for (float& a : acc) a *= rescale;
      for (int64_t j = 0; j < n; ++j) {
        if (!p.kv[b0 + j]) continue;
        const float pb = round_to_bf16(prob[j]);
        for (int64_t d = 0; d < p.head_dim; ++d) acc[d] += pb * p.kv[b0 + j][d];
      }
      m = m_new;
    }
    sum += std::exp(p.sink[h] - m);
    float* o = p.out + h * p.head_dim;
    for (int64_t d = 0; d < p.head_dim; ++d) o[d] = round_to_bf16(acc[d] / sum);
  }
}

}  // namespace

status sparse_attention_cpu(const sparse_attention_params& p) {
  if (!p.q || !p.sink || !p.out || (!p.kv && p.n_kv))
    return invalid_argument("sparse_attention: null pointer");
  if (p.n_heads <= 0 || p.head_dim <= 0 || p.n_kv < 0) return invalid_argument("sparse_attention: bad sizes");
  if (p.bf16) {
    sparse_attention_official(p);
    return {};
  }
  std::vector<float> logit(p.n_kv);
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* q = p.q + h * p.head_dim;
    float mx = p.sink[h];
    for (int64_t j = 0; j < p.n_kv; ++j) {
      float dot = 0;
      for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * p.kv[j][d];
      logit[j] = dot * p.scale;
      mx = std::fmax(mx, logit[j]);
    }
    float denom = std::exp(p.sink[h] - mx);
    for (int64_t j = 0; j < p.n_kv; ++j) denom += (logit[j] = std::exp(logit[j] - mx));
    float* o = p.out + h * p.head_dim;
    for (int64_t d = 0; d < p.head_dim; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < p.n_kv; ++j) {
      const float w = logit[j] / denom;
      for (int64_t d = 0; d < p.head_dim; ++d) o[d] += w * p.kv[j][d];
    }
  }
  return {};
}

status sparse_attention_gather_cpu(const sparse_attention_gather_params& p) {
  if (!p.q || !p.sink || !p.out || (p.n_idx && (!p.idx || !p.kv))) {
    return invalid_argument("sparse_attention_gather: null pointer");
  }
  if (p.n_queries < 0 || p.n_heads <= 0 || p.head_dim <= 0 || p.n_idx < 0 || p.n_entries < 0) {
    return invalid_argument("sparse_attention_gather: bad sizes");
  }
  const int64_t kvs = p.kv_stride ? p.kv_stride : p.head_dim;
  if (kvs < p.head_dim)
    return invalid_argument("sparse_attention_gather: kv_stride=%lld < head_dim", (long long)kvs);
  std::vector<const float*> rows;
  for (int64_t t = 0; t < p.n_queries; ++t) {
    rows.clear();
    for (int64_t j = 0; j < p.n_idx; ++j) {
      const int64_t e = p.idx[t * p.n_idx + j];
      if (e < -1 || e >= p.n_entries) {
        return out_of_range("sparse_attention_gather: idx[%lld][%lld]=%lld outside [-1, %lld)", (long long)t,
                            (long long)j, (long long)e, (long long)p.n_entries);
      }
      if (e >= 0) {
        rows.push_back(p.kv + e * kvs);
      } else if (p.bf16) {
        rows.push_back(nullptr);  // a masked slot keeps its place in the official blocks
      }
    }
    const int64_t qo = t * p.n_heads * p.head_dim;
    HART_RETURN_IF_ERROR(
        sparse_attention_cpu({p.q + qo, rows.empty() ? nullptr : rows.data(), p.sink, p.out + qo, p.n_heads,
                              p.head_dim, int64_t(rows.size()), p.scale, p.bf16}));
  }
  return {};
}

}  // namespace hart
