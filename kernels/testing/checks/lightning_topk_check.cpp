// lightning_topk: CUDA vs CPU index lists, exactly (same indices, same order,
// same -1 padding); max_abs counts mismatching slots.
#include "kernels/lightning_topk/lightning_topk.h"
#include "kernels/testing/op_check_util.h"

namespace hart::op_check_detail {

status check_lightning_topk(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "lightning_topk");
  const int64_t cases[][3] = {{1, 262144, 512}, {4, 65536, 2048}, {8, 4096, 512}};  // batch, n, k
  for (const auto& c : cases) {
    const int64_t batch = c[0], n = c[1], k = c[2];
    auto scores = normal(rng, batch * n, 1.0f);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    for (int64_t i = 0; i < batch * n / 64; ++i) scores[pick(rng)] = scores[pick(rng)];  // ties
    std::vector<int32_t> lengths(batch);
    std::uniform_int_distribution<int32_t> len(0, int32_t(n));
    for (int64_t b = 0; b < batch; ++b)
      lengths[b] = b == 0 ? int32_t(n) : (b == 1 ? int32_t(k / 2) : len(rng));
    std::vector<int32_t> cpu(batch * k), gpu;
    lightning_topk_params p;
    p.scores = scores.data();
    p.lengths = lengths.data();
    p.out = cpu.data();
    p.batch = batch;
    p.row_stride = n;
    p.k = k;
    HART_RETURN_IF_ERROR(lightning_topk_cpu(p));
    dev<float> d_s(scores);
    dev<int32_t> d_len(lengths), d_out(std::vector<int32_t>(batch * k, -7));
    HART_RETURN_IF_ERROR(d_out.ok());
    p.scores = d_s.get();
    p.lengths = d_len.get();
    p.out = d_out.get();
    HART_RETURN_IF_ERROR(lightning_topk_cuda(p, nullptr));
    HART_RETURN_IF_ERROR(cuda_status("lightning_topk", cudaDeviceSynchronize()));
    HART_RETURN_IF_ERROR(d_out.to_host(gpu));
    op_check_line l{"lightning_topk",
                    "batch=" + std::to_string(batch) + " n=" + std::to_string(n) + " k=" + std::to_string(k),
                    0,
                    0,
                    "exact (indices)",
                    true};
    for (size_t i = 0; i < cpu.size(); ++i) l.max_abs += cpu[i] != gpu[i];
    l.max_rel = l.max_abs / double(cpu.size());
    l.pass = l.max_abs == 0;
    lines.push_back(l);
  }
  return {};
}

}  // namespace hart::op_check_detail
