// flash_compressor (C1): the engine's compressor, prefill and decode paths, vs
// flash_compressor_cpu on Flash's shapes (CSA main as FP8 KV entries + the
// indexer's Hadamard-FP4 keys; HCA entries), after a history the CPU wrote.
// The rule of kernels/flash_compressor/flash_compressor_test.cpp: values
// before quantization within 1e-5 + 1e-6·candidates of the row's max |value|
// (online vs three-pass softmax, expf/sincosf last bits); every stored entry
// bit-equal to the host quantization of the GPU's own pre-quantization values;
// rings bitwise; nothing outside the call's entries written; stored values
// that differ from the CPU's (a pre-quantization value a hair from a rounding
// step) at most max(4, 1%). bf16 (flash_compressor_desc::bf16 on every
// compressor, as the GPU engine's fp8 mode sets it; the shapes its pools take:
// FP8 KV entries or fp8 rows, the indexer's FP4 keys): the test's
// PrefillBf16MatchesCpu / DecodeBf16MatchesCpu rule, pre-quantization rows
// bitwise but at most 1 + 0.1% of them (CUDA's correctly rounded exp and
// sin/cos against glibc's, ~2e-4 of rows), those within 2^-6 of the row's
// max |value|; the stored entries and rings as above.
#include "kernels/flash_compressor/flash_compressor_cases.h"
#include "kernels/testing/op_check_util.h"

#include <cstdio>
#include <memory>

namespace hart::op_check_detail {
namespace {

using namespace fc_testing;

// dev's failures surface as statuses, not at construction: checked before the call.
status ready(const device_problem<dev>& d) {
  for (const auto& r : d.ring) HART_RETURN_IF_ERROR(r->ok());
  for (const auto& e : d.ent) HART_RETURN_IF_ERROR(e->ok());
  return d.start.ok();
}

// One call (spans set in `pr`, pools holding the state before it) on both
// sides, quantized and unquantized; one line per compressor.
status run_call(const problem& pr, bool decode, const std::string& shape, std::vector<op_check_line>& lines) {
  problem cpu_q = pr, cpu_n = as_unquantized(pr);
  flash_compressor_params hq = host_params(cpu_q), hn = host_params(cpu_n);
  if (decode) hq.cu_tokens = hn.cu_tokens = nullptr;
  HART_RETURN_IF_ERROR(flash_compressor_cpu(hq));
  HART_RETURN_IF_ERROR(flash_compressor_cpu(hn));
  const problem gpu_n_in = as_unquantized(pr);
  device_problem<dev> dq(pr), dn(gpu_n_in);
  HART_RETURN_IF_ERROR(ready(dq));
  HART_RETURN_IF_ERROR(ready(dn));
  for (const device_problem<dev>* d : {&dq, &dn}) {
    const flash_compressor_params p = d->params(d == &dq ? pr : gpu_n_in, decode);
    HART_RETURN_IF_ERROR(decode ? flash_compressor_decode_cuda(p, nullptr)
                                : flash_compressor_prefill_cuda(p, nullptr));
  }
  HART_RETURN_IF_ERROR(cuda_status("flash_compressor", cudaDeviceSynchronize()));
  for (size_t c = 0; c < pr.shapes.size(); ++c) {
    std::vector<uint8_t> ent_q, ent_n;
    std::vector<float> ring_q, ring_n;
    HART_RETURN_IF_ERROR(dq.ent[c]->to_host(ent_q));
    HART_RETURN_IF_ERROR(dn.ent[c]->to_host(ent_n));
    HART_RETURN_IF_ERROR(dq.ring[c]->to_host(ring_q));
    HART_RETURN_IF_ERROR(dn.ring[c]->to_host(ring_n));
    compare_result r;
    compare_entries(pr, int64_t(c), ent_n, cpu_n.comps[c].entries, ent_q, cpu_q.comps[c].entries, r);
    compare_rings(ring_q, cpu_q.comps[c].ring, r);
    compare_rings(ring_n, cpu_n.comps[c].ring, r);
    const comp_shape& s = pr.shapes[c];
    op_check_line l;
    l.op = decode ? "flash_compressor_decode" : "flash_compressor_prefill";
    const bool rows = s.format == flash_entry_format::f32 && s.quant == flash_entry_quant::fp8_nope;
    l.shape = shape +
              (s.quant == flash_entry_quant::hadamard_fp4 ? " indexer keys"
               : s.overlap                                ? " CSA"
                                                          : " HCA") +
              (rows ? " f32 rows" : "");
    if (s.bf16) {
      l.shape += " bf16 differ=" + std::to_string(r.n_bf16_differ) + "/" + std::to_string(r.n_bf16_rows);
    }
    l.shape += " flips=" + std::to_string(r.n_flips) + "/" + std::to_string(r.n_values);
    l.max_abs = double(r.n_flips);
    l.max_rel = r.max_pre_err;
    char tol[64];
    if (s.bf16) {
      std::snprintf(tol, sizeof tol, "rows exact but 1+0.1%% (%.2g * max|row|)", pre_tolerance(s));
    } else {
      std::snprintf(tol, sizeof tol, "%.2g * max|row|, entries exact", pre_tolerance(s));
    }
    l.tol = tol;
    l.pass = r.ok && r.n_flips <= std::max<int64_t>(4, r.n_values / 100) &&
             r.n_bf16_differ <= 1 + r.n_bf16_rows / 1000;
    lines.push_back(l);
  }
  return {};
}

// History [0, start) by the CPU, then one prefill call over [start, start + len).
status prefill(std::mt19937& rng, const std::vector<comp_shape>& shapes, int64_t P,
               const std::vector<int64_t>& start, const std::vector<int64_t>& len, const std::string& shape,
               std::vector<op_check_line>& lines) {
  int64_t max_pos = 1;
  for (size_t s = 0; s < start.size(); ++s) max_pos = std::max(max_pos, start[s] + len[s] + 1);
  problem pr = make_problem(shapes, P, int64_t(start.size()), max_pos, rng);
  set_spans(pr, std::vector<int64_t>(start.size(), 0), start);
  fill_projections(pr, rng);
  HART_RETURN_IF_ERROR(flash_compressor_cpu(host_params(pr)));
  set_spans(pr, start, len);
  fill_projections(pr, rng);
  return run_call(pr, false, shape, lines);
}

// History by the CPU, then one decode step of every sequence.
status decode(std::mt19937& rng, const std::vector<comp_shape>& shapes, int64_t P,
              const std::vector<int64_t>& pos, const std::string& shape, std::vector<op_check_line>& lines) {
  int64_t max_pos = 1;
  for (int64_t p : pos) max_pos = std::max(max_pos, p + 2);
  problem pr = make_problem(shapes, P, int64_t(pos.size()), max_pos, rng);
  set_spans(pr, std::vector<int64_t>(pos.size(), 0), pos);
  fill_projections(pr, rng);
  HART_RETURN_IF_ERROR(flash_compressor_cpu(host_params(pr)));
  set_spans(pr, pos, std::vector<int64_t>(pos.size(), 1));
  fill_projections(pr, rng);
  return run_call(pr, true, shape, lines);
}

}  // namespace

status check_flash_compressor(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "flash_compressor");
  const std::vector<comp_shape> csa = {flash_csa_main(), flash_csa_indexer()}, hca = {flash_hca()};
  // A 513-token prompt, and ragged continuations across page edges.
  HART_RETURN_IF_ERROR(prefill(rng, csa, 256, {0}, {513}, "P=256 spans 0+513", lines));
  HART_RETURN_IF_ERROR(prefill(rng, csa, 256, {7, 254, 3}, {5, 129, 3}, "P=256 ragged spans", lines));
  HART_RETURN_IF_ERROR(prefill(rng, hca, 256, {0, 100}, {513, 400}, "P=256 spans 0+513 100+400", lines));
  // Decode steps that close a CSA block (position 3 mod 4) and an HCA block (127 mod 128).
  HART_RETURN_IF_ERROR(decode(rng, csa, 256, {0, 3, 255, 1002}, "P=256 positions 0 3 255 1002", lines));
  HART_RETURN_IF_ERROR(decode(rng, hca, 256, {0, 127, 255, 383}, "P=256 positions 0 127 255 383", lines));
  // bf16 (the GPU engine's fp8 mode): the same paths with FP8 KV entries, and with fp8 rows (the pools
  // without kv_entries: deterministic runs, other head shapes).
  const std::vector<comp_shape> csa16 = with_bf16(csa), hca16 = with_bf16(hca);
  const std::vector<comp_shape> csa16_rows =
      with_bf16({flash_csa_main(flash_entry_format::f32), flash_csa_indexer()});
  const std::vector<comp_shape> hca16_rows = with_bf16({flash_hca(flash_entry_format::f32)});
  HART_RETURN_IF_ERROR(prefill(rng, csa16, 256, {0}, {513}, "P=256 spans 0+513", lines));
  HART_RETURN_IF_ERROR(prefill(rng, csa16, 256, {7, 254, 3}, {5, 129, 3}, "P=256 ragged spans", lines));
  HART_RETURN_IF_ERROR(
      prefill(rng, csa16_rows, 128, {5, 130}, {300, 260}, "P=128 spans 5+300 130+260", lines));
  HART_RETURN_IF_ERROR(prefill(rng, hca16, 256, {0, 100}, {513, 400}, "P=256 spans 0+513 100+400", lines));
  HART_RETURN_IF_ERROR(prefill(rng, hca16_rows, 128, {127, 0}, {1, 129}, "P=128 spans 127+1 0+129", lines));
  HART_RETURN_IF_ERROR(decode(rng, csa16, 256, {0, 3, 255, 1002}, "P=256 positions 0 3 255 1002", lines));
  HART_RETURN_IF_ERROR(decode(rng, csa16_rows, 256, {3, 7, 511}, "P=256 positions 3 7 511", lines));
  HART_RETURN_IF_ERROR(decode(rng, hca16, 256, {0, 127, 255, 383}, "P=256 positions 0 127 255 383", lines));
  return {};
}

}  // namespace hart::op_check_detail
