// The MoE block on the device (runtime/model/moe.cpp is the reference), with
// no host round-trip: router GEMM and routing, the shared expert into y, then
// per chunk of tokens the routed rows sorted by expert on the device
// (moe_dispatch.h), gathered once, run through the experts' grouped linears
// (three launches for all experts) and added into y in ascending expert order
// after the shared expert: the CPU's summation order (bf16: the official one,
// the routed experts first, the shared one last).
#include "kernels/linear/linear.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/swiglu/swiglu.h"
#include "runtime/gpu/engine_kernels.h"
#include "runtime/gpu/gpu_engine_impl.h"
#include "runtime/gpu/moe_dispatch.h"

#include <algorithm>

namespace hart::gpu {
namespace {

// out [D, n] = w2(swiglu(w1 x, w3 x) · row_weight), through hidden rows g, up, h.
status expert_run(engine_state& s, const device_expert& e, const float* x, int64_t n, const float* row_weight,
                  float* g, float* up, float* h, float* out) {
  HART_RETURN_IF_ERROR(linear_run_activation(s, e.w1, x, n, g));
  HART_RETURN_IF_ERROR(linear_run_activation(s, e.w3, x, n, up));
  swiglu_params sw{g, up, row_weight, h, n, e.w1.out, 0, float(s.cfg.swiglu_limit)};
  sw.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(swiglu_cuda(sw, s.stream));
  return linear_run_activation(s, e.w2, h, n, out);
}

// y [out, rows] = x [in, rows] through each sorted row's expert (the chunk's
// plan, tiles of up to tile_rows); on tensor cores x is read as the codes the
// caller left in A.moe_codes, through FP8 or (`mxfp4`) MXFP4 experts.
status grouped_run(engine_state& s, const linear_group_weight* table, const float* x, bool tensor_cores,
                   bool mxfp4, int64_t tile_rows, int64_t rows, int64_t in, int64_t out, float* y) {
  const arena_buffers& A = s.a;
  const int64_t E = s.cfg.n_routed_experts;
  linear_grouped_params p{x,
                          y,
                          table,
                          E,
                          A.tile_group,
                          A.tile_row0,
                          A.tile_rows,
                          A.n_tiles,
                          moe_plan_max_tiles(rows, E, tile_rows),
                          rows,
                          in,
                          out};
  p.max_tile_rows = tile_rows;
  if (!tensor_cores) return linear_grouped_cuda(p, s.stream);
  p.x_codes = A.moe_codes;
  p.x_scales = A.moe_scales;
  p.w_mxfp4 = mxfp4;
  return linear_grouped_tc_cuda(p, s.stream);
}

}  // namespace

// Every routed row of a pass in one chunk up to the plan's limit: each chunk
// reads the weights of every expert it touches (a 512-token prefill cut into
// six chunks read them six times).
int64_t moe_rows(const engine_state& s) {
  const int64_t K = std::max<int64_t>(s.cfg.n_activated_experts, 1);
  return std::min(s.params.max_batch_tokens * K, std::max(moe_plan_max_rows / K * K, K));
}

status moe_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y,
               std::vector<int32_t>* experts_out) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
  const int64_t T = p.n_tokens(), D = c.hidden_size, E = c.n_routed_experts, K = c.n_activated_experts;
  const int64_t I = c.moe_inter_dim;
  HART_RETURN_IF_ERROR(linear_run(s, w.gate, x, T, A.route_logits));
  if (w.hash_moe) HART_RETURN_IF_ERROR(moe_hash_cuda(A.ids, w.tid2eid, T, K, A.hash, s.stream));
  HART_RETURN_IF_ERROR(moe_route_cuda({A.route_logits, w.gate_bias, w.hash_moe ? A.hash : nullptr, A.experts,
                                       A.route_w, T, E, K, float(c.route_scale)},
                                      s.stream));
  if (experts_out) HART_RETURN_IF_ERROR(s.download(experts_out, A.experts, T * K));  // traces only: waits
  if (c.n_shared_experts > 0) {
    // Beside the routed experts on small passes (own hidden rows); they add into y after it.
    const bool side = T <= k_branch_tokens;
    HART_RETURN_IF_ERROR(branch_run(s, T, [&] {
      return expert_run(s, w.shared, x, T, nullptr, side ? A.shared_g : A.g, side ? A.shared_up : A.up,
                        side ? A.shared_h : A.h, y);
    }));
  } else {
    HART_RETURN_IF_ERROR(
        cuda_status(cudaMemsetAsync(y, 0, size_t(T * D) * sizeof(float), s.stream), "gpu engine: moe"));
  }
  // The fp8 mode's experts take FP8-QDQ'd inputs (codes, or fp32 values with
  // qdq_input): quantized once per chunk here, as linear_run would per expert.
  // On tensor cores (every expert in codes) they are quantized to codes + scales instead.
  const bool qdq = s.params.base.prec == precision::fp8;
  // MXFP4 experts (kept so only with tensor cores on: device_weights_upload) run there only.
  const bool fp4 = w.experts_fp4;
  const bool tc = qdq && (w.experts_fp8 || fp4) && s.params.fp8_tensor_cores && D % 128 == 0 && I % 128 == 0;
  if (fp4 && !tc)
    return failed_precondition("gpu engine: layer %lld's MXFP4 experts need fp8_tensor_cores", (long long)il);
  // Wide tiles read an expert's weights once per 64 of its rows, narrow ones
  // once per 8 but with 4x the loads in flight per CTA (decode's few rows per
  // expert). Wide from 4 rows per expert on average (prefill chunks of >= ~171
  // tokens at top-6 of 256); they sum in another order than narrow ones, so
  // --deterministic keeps every row on the narrow kernel.
  auto tile_rows_for = [&](int64_t rows) {
    return tc && !s.params.base.deterministic && rows >= 4 * E ? linear_grouped_wide_tile_rows
                                                               : linear_grouped_tile_rows;
  };
  const int64_t chunk = moe_rows(s) / K;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t nt = std::min(chunk, T - t0), rows = nt * K, tile_rows = tile_rows_for(rows);
    moe_plan_params mp;
    mp.experts = A.experts + t0 * K;
    mp.weights = A.route_w + t0 * K;
    mp.n_tokens = nt;
    mp.k = K;
    mp.n_experts = E;
    mp.row_width = D;
    mp.src = A.moe_src;
    mp.row_weight = A.moe_w;
    mp.slot = A.moe_slot;
    mp.tile_group = A.tile_group;
    mp.tile_row0 = A.tile_row0;
    mp.tile_rows = A.tile_rows;
    mp.n_tiles = A.n_tiles;
    mp.max_tile_rows = int32_t(tile_rows);
    HART_RETURN_IF_ERROR(moe_plan_cuda(mp, s.stream));
    HART_RETURN_IF_ERROR(copy_rows_cuda(A.xe, A.iota_d, x + t0 * D, A.moe_src, D, rows, false, s.stream));
    if (tc) {
      HART_RETURN_IF_ERROR(fp8_act_quant_cuda(A.xe, D, A.moe_codes, A.moe_scales, rows, D, s.stream));
    } else if (qdq) {
      HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(A.xe, rows, D, 128, D, s.stream));
    }
    HART_RETURN_IF_ERROR(grouped_run(s, w.expert_w1, A.xe, tc, fp4, tile_rows, rows, D, I, A.g));
    HART_RETURN_IF_ERROR(grouped_run(s, w.expert_w3, A.xe, tc, fp4, tile_rows, rows, D, I, A.up));
    // bf16: the experts' outputs are rounded as they are read (here g and up, ye in the combine).
    swiglu_params sw{A.g, A.up, A.moe_w, A.h, rows, I, 0, float(c.swiglu_limit)};
    sw.bf16 = s.bf16;
    HART_RETURN_IF_ERROR(swiglu_cuda(sw, s.stream));
    if (tc) {
      HART_RETURN_IF_ERROR(fp8_act_quant_cuda(A.h, I, A.moe_codes, A.moe_scales, rows, I, s.stream));
    } else if (qdq) {
      HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(A.h, rows, I, 128, I, s.stream));
    }
    HART_RETURN_IF_ERROR(grouped_run(s, w.expert_w2, A.h, tc, fp4, tile_rows, rows, I, D, A.ye));
    if (t0 == 0) HART_RETURN_IF_ERROR(branch_join(s));  // y holds the shared expert
    HART_RETURN_IF_ERROR(
        moe_combine_cuda(y + t0 * D, A.ye, A.experts + t0 * K, A.moe_slot, nt, K, D, s.bf16, s.stream));
  }
  return {};
}

}  // namespace hart::gpu
