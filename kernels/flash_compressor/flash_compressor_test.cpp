// flash_compressor: argument errors; the CPU reference fed in chunks equals one
// call (entries bitwise: the rings keep every row a later call reads); under
// HART_CUDA the prefill and decode kernels against the CPU reference on fresh
// random inputs (Flash CSA main + indexer, HCA, tiny-a/tiny-c shapes; spans of
// 0, 1, 3, 5, 127, 129, 513 tokens, unaligned starts, page edges, several
// sequences in one m-row window, pools poisoned first): pre-quantization values
// within pre_tolerance, stored entries bit-equal to the host quantization of the
// GPU's own pre-quantization values, rings and every untouched byte bitwise.
// With bf16 (the official roundings) the same cases at V4 shapes compare the
// entries bitwise, up to the rare exp/sin/cos rounding that pre_tolerance
// describes.
#include "kernels/flash_compressor/flash_compressor.h"

#include "kernels/flash_compressor/flash_compressor_cases.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef HART_CUDA
#include "kernels/testing/cuda_test_util.h"
#endif

namespace hart {
namespace {

using namespace fc_testing;
using testing::seed_trace;
using testing::test_seed;

const comp_shape k_tiny_a_csa{4, 64, 16, true, flash_entry_quant::fp8_nope, flash_entry_format::f32};
const comp_shape k_tiny_a_idx{4, 32, 16, true, flash_entry_quant::hadamard_fp4, flash_entry_format::f32};
const comp_shape k_tiny_a_hca{16, 64, 16, false, flash_entry_quant::fp8_nope, flash_entry_format::f32};
const comp_shape k_tiny_c_csa{4, 128, 32, true, flash_entry_quant::fp8_nope, flash_entry_format::f32};
const comp_shape k_tiny_c_idx{4, 64, 32, true, flash_entry_quant::hadamard_fp4, flash_entry_format::f32};
const comp_shape k_tiny_c_hca{128, 128, 32, false, flash_entry_quant::none, flash_entry_format::f32};

// -- arguments -----------------------------------------------------------------

TEST(FlashCompressor, BadArgumentsAreInvalidArgument) {
  std::mt19937 rng(1);
  problem pr = make_problem({flash_csa_main()}, 256, 1, 16, rng);
  set_spans(pr, {0}, {8});
  fill_projections(pr, rng);
  auto expect_bad = [&](auto mutate, const char* what) {
    problem q = pr;
    flash_compressor_params p = host_params(q);
    mutate(p);
    const status st = flash_compressor_cpu(p);
    EXPECT_EQ(st.code(), status_code::invalid_argument) << what << ": " << st.to_string();
    EXPECT_NE(st.message().find("flash_compressor"), std::string::npos) << st.message();
  };
  expect_bad([](flash_compressor_params& p) { p.n_comp = 3; }, "n_comp");
  expect_bad([](flash_compressor_params& p) { p.comp[0].rate = 0; }, "rate");
  expect_bad([](flash_compressor_params& p) { p.page_size = 250; }, "page size");
  expect_bad([](flash_compressor_params& p) { p.comp[0].kv = nullptr; }, "kv");
  expect_bad([](flash_compressor_params& p) { p.comp[0].rope_dim = 3; }, "rope_dim");
  expect_bad([](flash_compressor_params& p) { p.comp[0].dim = 256; }, "kv_entry dim");
  expect_bad([](flash_compressor_params& p) { p.comp[0].ring_page_stride = 8; }, "ring stride");
  expect_bad([](flash_compressor_params& p) { p.comp[0].entry_page_stride_bytes = 584; }, "entry stride");
  expect_bad([](flash_compressor_params& p) { p.cu_tokens = nullptr; }, "no cu_tokens with 8 tokens");
  expect_bad([](flash_compressor_params& p) { p.start = nullptr; }, "start");
}

// -- CPU reference: chunking --------------------------------------------------

// One call over [0, N) and the same tokens fed in random chunks (sizes 1..2m+3)
// give bitwise the same entries.
void check_chunking(const std::vector<comp_shape>& shapes, int64_t P, int64_t N, uint32_t seed) {
  std::mt19937 rng(seed);
  problem whole = make_problem(shapes, P, 1, N, rng);
  set_spans(whole, {0}, {N});
  fill_projections(whole, rng);
  problem chunked = whole;
  ASSERT_TRUE(flash_compressor_cpu(host_params(whole)).ok());
  const int64_t max_chunk = 2 * shapes[0].rate + 3;
  std::uniform_int_distribution<int64_t> len(1, max_chunk);
  for (int64_t p0 = 0; p0 < N;) {
    const int64_t n = std::min(N - p0, len(rng));
    problem step = chunked;  // chunk's projections: rows [p0, p0 + n) of the whole
    set_spans(step, {p0}, {n});
    for (size_t c = 0; c < shapes.size(); ++c) {
      const int64_t w = width_of(shapes[c]);
      step.comps[c].kv.assign(whole.comps[c].kv.begin() + p0 * w, whole.comps[c].kv.begin() + (p0 + n) * w);
      step.comps[c].gate.assign(whole.comps[c].gate.begin() + p0 * w,
                                whole.comps[c].gate.begin() + (p0 + n) * w);
    }
    ASSERT_TRUE(flash_compressor_cpu(host_params(step)).ok());
    for (size_t c = 0; c < shapes.size(); ++c) {
      chunked.comps[c].ring = step.comps[c].ring;
      chunked.comps[c].entries = step.comps[c].entries;
    }
    p0 += n;
  }
  for (size_t c = 0; c < shapes.size(); ++c) {
    EXPECT_EQ(chunked.comps[c].entries, whole.comps[c].entries) << "comp " << c;
  }
}

TEST(FlashCompressor, CpuChunkedEqualsWhole) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  check_chunking({k_tiny_a_csa, k_tiny_a_idx}, 32, 150, seed);
  check_chunking({k_tiny_a_hca}, 32, 150, seed + 1);
  check_chunking({k_tiny_c_hca}, 128, 400, seed + 2);
  check_chunking({flash_csa_main(), flash_csa_indexer()}, 64, 140, seed + 3);
  check_chunking(with_bf16({flash_csa_main(), flash_csa_indexer()}), 64, 140, seed + 4);
  check_chunking(with_bf16({k_tiny_c_hca}), 128, 400, seed + 5);
}

// bf16: every pre-quantization value is a bf16 value (the last step, RoPE, rounds
// them all), and the flag changes entries.
TEST(FlashCompressor, CpuBf16EntriesAreBf16) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const auto& shapes :
       {unquantized({flash_csa_main(), flash_csa_indexer()}), unquantized({flash_hca()})}) {
    problem f32 = make_problem(shapes, 256, 1, 300, rng);
    set_spans(f32, {0}, {300});
    fill_projections(f32, rng);
    problem bf16 = f32;
    bf16.shapes = with_bf16(shapes);
    ASSERT_TRUE(flash_compressor_cpu(host_params(f32)).ok());
    ASSERT_TRUE(flash_compressor_cpu(host_params(bf16)).ok());
    for (size_t c = 0; c < shapes.size(); ++c) {
      const comp_shape& sh = shapes[c];
      SCOPED_TRACE("dim " + std::to_string(sh.dim) + " rate " + std::to_string(sh.rate));
      for (auto [s, blk] : closing_blocks(bf16, sh.rate)) {
        std::vector<float> v(size_t(sh.dim));
        std::memcpy(v.data(), bf16.comps[c].entries.data() + entry_offset(bf16, int64_t(c), s, blk),
                    v.size() * 4);
        for (size_t i = 0; i < v.size(); ++i)
          ASSERT_EQ(round_to_bf16(v[i]), v[i]) << "block " << blk << " dim " << i;
      }
      EXPECT_NE(bf16.comps[c].entries, f32.comps[c].entries);
    }
  }
}

#ifdef HART_CUDA

// -- CUDA ---------------------------------------------------------------------

using testing::cuda_synced;
using testing::device_vec;

// Runs the call described by `pr` (spans set, pools holding the state before
// it) on the CPU and the GPU, quantized and unquantized, and compares.
void run_and_compare(const problem& pr, bool decode, const std::string& label) {
  SCOPED_TRACE(label);
  problem cpu_q = pr, cpu_n = as_unquantized(pr);
  const problem gpu_n_in = cpu_n;
  flash_compressor_params hq = host_params(cpu_q), hn = host_params(cpu_n);
  if (decode) hq.cu_tokens = hn.cu_tokens = nullptr;
  ASSERT_TRUE(flash_compressor_cpu(hq).ok());
  ASSERT_TRUE(flash_compressor_cpu(hn).ok());

  device_problem<device_vec> dq(pr), dn(gpu_n_in);
  const flash_compressor_params pq = dq.params(pr, decode), pn = dn.params(gpu_n_in, decode);
  const status a =
      decode ? flash_compressor_decode_cuda(pq, nullptr) : flash_compressor_prefill_cuda(pq, nullptr);
  const status b =
      decode ? flash_compressor_decode_cuda(pn, nullptr) : flash_compressor_prefill_cuda(pn, nullptr);
  ASSERT_TRUE(a.ok()) << a.to_string();
  ASSERT_TRUE(b.ok()) << b.to_string();
  ASSERT_TRUE(cuda_synced(nullptr));
  for (size_t c = 0; c < pr.shapes.size(); ++c) {
    compare_result r;
    compare_entries(pr, int64_t(c), dn.ent[c]->to_host(), cpu_n.comps[c].entries, dq.ent[c]->to_host(),
                    cpu_q.comps[c].entries, r);
    compare_rings(dq.ring[c]->to_host(), cpu_q.comps[c].ring, r);
    compare_rings(dn.ring[c]->to_host(), cpu_n.comps[c].ring, r);
    EXPECT_TRUE(r.ok) << "comp " << c << ": " << r.what << " (max pre-quant err " << r.max_pre_err << ")";
    // Flips come only from pre-quantization values within pre_tolerance of a
    // rounding boundary: rare. A high rate means the rule above is hiding a bug.
    EXPECT_LE(r.n_flips, std::max<int64_t>(4, r.n_values / 100))
        << "comp " << c << ": " << r.n_flips << " of " << r.n_values << " stored values differ from the CPU";
    // bf16 rows differ only by the transcendentals' rounding (pre_tolerance): ~2e-4 of
    // rows (measured on 16384-entry calls), so one per call plus 0.1% leaves room; a
    // wrong order or rounding moves far more.
    EXPECT_LE(r.n_bf16_differ, 1 + r.n_bf16_rows / 1000)
        << "comp " << c << ": " << r.n_bf16_differ << " of " << r.n_bf16_rows
        << " bf16 entries differ from the CPU";
  }
}

// Prefill: history [0, start) through the CPU reference, then spans
// [start, start + len) checked.
void check_prefill(const std::vector<comp_shape>& shapes, int64_t P, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& len, uint32_t seed, const std::string& label) {
  std::mt19937 rng(seed);
  int64_t max_pos = 1;
  for (size_t s = 0; s < start.size(); ++s) max_pos = std::max(max_pos, start[s] + len[s] + 1);
  problem pr = make_problem(shapes, P, int64_t(start.size()), max_pos, rng);
  set_spans(pr, std::vector<int64_t>(start.size(), 0), start);
  fill_projections(pr, rng);
  const status history = flash_compressor_cpu(host_params(pr));
  ASSERT_TRUE(history.ok()) << label << ": the history: " << history.to_string();
  set_spans(pr, start, len);
  fill_projections(pr, rng);
  run_and_compare(pr, false, label);
}

TEST(FlashCompressorCuda, PrefillMatchesCpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  check_prefill({flash_csa_main(), flash_csa_indexer()}, 256, {0}, {513}, seed, "Flash CSA 513 from 0");
  check_prefill({flash_csa_main(), flash_csa_indexer()}, 256, {0, 7, 254, 256, 3, 101},
                {1, 5, 129, 127, 0, 3}, seed + 1, "Flash CSA ragged");
  check_prefill({flash_csa_main(flash_entry_format::f32)}, 128, {5, 130}, {300, 260}, seed + 2,
                "Flash CSA f32 rows");
  check_prefill({flash_hca()}, 256, {0, 100, 256}, {513, 400, 128}, seed + 3, "Flash HCA");
  check_prefill({flash_hca(flash_entry_format::f32)}, 128, {127, 0}, {1, 129}, seed + 4,
                "Flash HCA f32 edges");
  check_prefill({k_tiny_a_csa, k_tiny_a_idx}, 32, {0, 3, 31, 64}, {150, 1, 2, 33}, seed + 5, "tiny-a CSA");
  check_prefill({k_tiny_a_hca}, 32, {0, 15, 17}, {150, 2, 47}, seed + 6, "tiny-a HCA");
  check_prefill({k_tiny_c_csa, k_tiny_c_idx}, 128, {0, 126}, {300, 5}, seed + 7, "tiny-c CSA");
  check_prefill({k_tiny_c_hca}, 128, {0, 120}, {400, 9}, seed + 8, "tiny-c HCA (quant none)");
  // Many short spans share one m-row window (HCA: 40 sequences in 128 rows).
  std::vector<int64_t> st, ln;
  for (int s = 0; s < 40; ++s) st.push_back(128 * s + 124 + s % 4), ln.push_back(1 + s % 4);
  check_prefill({flash_hca()}, 128, st, ln, seed + 9, "HCA many short spans");
  check_prefill({flash_csa_main(), flash_csa_indexer()}, 128, st, ln, seed + 10, "CSA many short spans");
}

// Decode: history by the CPU reference, then `steps` one-token steps for every
// sequence, each checked (crossing CSA and HCA block closes and page edges).
void check_decode(const std::vector<comp_shape>& shapes, int64_t P, const std::vector<int64_t>& start,
                  int64_t steps, uint32_t seed, const std::string& label) {
  std::mt19937 rng(seed);
  int64_t max_pos = 1;
  for (int64_t s : start) max_pos = std::max(max_pos, s + steps + 1);
  problem pr = make_problem(shapes, P, int64_t(start.size()), max_pos, rng);
  set_spans(pr, std::vector<int64_t>(start.size(), 0), start);
  fill_projections(pr, rng);
  const status history = flash_compressor_cpu(host_params(pr));
  ASSERT_TRUE(history.ok()) << label << ": the history: " << history.to_string();
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<int64_t> pos(start.size());
    for (size_t s = 0; s < start.size(); ++s) pos[s] = start[s] + k;
    set_spans(pr, pos, std::vector<int64_t>(start.size(), 1));
    fill_projections(pr, rng);
    run_and_compare(pr, true, label + " step " + std::to_string(k));
    if (::testing::Test::HasFailure()) return;
    // Advance the state by the CPU reference (checked equal above).
    flash_compressor_params hp = host_params(pr);
    hp.cu_tokens = nullptr;
    ASSERT_TRUE(flash_compressor_cpu(hp).ok());
  }
}

TEST(FlashCompressorCuda, DecodeMatchesCpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  check_decode({flash_csa_main(), flash_csa_indexer()}, 256, {0, 1, 250, 509, 3000}, 9, seed, "Flash CSA");
  check_decode({flash_hca()}, 256, {0, 120, 250, 383, 1000}, 10, seed + 1, "Flash HCA");
  check_decode({k_tiny_a_csa, k_tiny_a_idx}, 32, {0, 29, 30, 31}, 6, seed + 2, "tiny-a CSA");
  check_decode({k_tiny_c_hca}, 128, {125, 250}, 6, seed + 3, "tiny-c HCA");
  std::vector<int64_t> many;
  for (int s = 0; s < 77; ++s) many.push_back(13 * s);
  check_decode({flash_csa_main(), flash_csa_indexer()}, 256, many, 5, seed + 4, "Flash CSA batch 77");
}

// bf16 at V4 shapes (CSA main as kv_entry and f32 rows, the indexer's Hadamard
// FP4 keys, HCA with its 128 candidates) and the tiny teams (c = 128, 64, 32):
// spans from block 0, crossing block and page edges, ragged, many per window.
TEST(FlashCompressorCuda, PrefillBf16MatchesCpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  const std::vector<comp_shape> csa = with_bf16({flash_csa_main(), flash_csa_indexer()});
  check_prefill(csa, 256, {0}, {513}, seed, "bf16 Flash CSA 513 from 0");
  check_prefill(csa, 256, {0, 7, 254, 256, 3, 101}, {1, 5, 129, 127, 0, 3}, seed + 1,
                "bf16 Flash CSA ragged");
  check_prefill(with_bf16({flash_csa_main(flash_entry_format::f32)}), 128, {5, 130}, {300, 260}, seed + 2,
                "bf16 Flash CSA f32 rows");
  check_prefill(with_bf16({flash_hca()}), 256, {0, 100, 256}, {513, 400, 128}, seed + 3, "bf16 Flash HCA");
  check_prefill(with_bf16({flash_hca(flash_entry_format::f32)}), 128, {127, 0}, {1, 129}, seed + 4,
                "bf16 Flash HCA f32 edges");
  check_prefill(with_bf16({k_tiny_a_csa, k_tiny_a_idx}), 32, {0, 3, 31, 64}, {150, 1, 2, 33}, seed + 5,
                "bf16 tiny-a CSA");
  check_prefill(with_bf16({k_tiny_c_csa, k_tiny_c_idx}), 128, {0, 126}, {300, 5}, seed + 6,
                "bf16 tiny-c CSA");
  check_prefill(with_bf16({k_tiny_c_hca}), 128, {0, 120}, {400, 9}, seed + 7, "bf16 tiny-c HCA");
  std::vector<int64_t> st, ln;
  for (int s = 0; s < 40; ++s) st.push_back(128 * s + 124 + s % 4), ln.push_back(1 + s % 4);
  check_prefill(with_bf16({flash_hca()}), 128, st, ln, seed + 8, "bf16 HCA many short spans");
  check_prefill(csa, 128, st, ln, seed + 9, "bf16 CSA many short spans");
}

TEST(FlashCompressorCuda, DecodeBf16MatchesCpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  check_decode(with_bf16({flash_csa_main(), flash_csa_indexer()}), 256, {0, 1, 250, 509, 3000}, 9, seed,
               "bf16 Flash CSA");
  check_decode(with_bf16({flash_hca()}), 256, {0, 120, 250, 383, 1000}, 10, seed + 1, "bf16 Flash HCA");
  check_decode(with_bf16({k_tiny_a_csa, k_tiny_a_idx}), 32, {0, 29, 30, 31}, 6, seed + 2, "bf16 tiny-a CSA");
  std::vector<int64_t> many;
  for (int s = 0; s < 77; ++s) many.push_back(13 * s);
  check_decode(with_bf16({flash_csa_main(), flash_csa_indexer()}), 256, many, 5, seed + 3,
               "bf16 Flash CSA batch 77");
}

TEST(FlashCompressorCuda, UnsupportedShapesSayWhy) {
  HART_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  comp_shape odd{4, 96, 16, true, flash_entry_quant::fp8_nope, flash_entry_format::f32};
  problem pr = make_problem({odd}, 32, 1, 16, rng);
  set_spans(pr, {0}, {8});
  fill_projections(pr, rng);
  const status st = flash_compressor_cuda_supports(host_params(pr));
  EXPECT_EQ(st.code(), status_code::unimplemented) << st.to_string();
  EXPECT_NE(st.message().find("dim=96"), std::string::npos) << st.message();
  EXPECT_TRUE(flash_compressor_cpu(host_params(pr)).ok());  // the reference handles any dim
  flash_compressor_params p = host_params(pr);
  EXPECT_EQ(flash_compressor_decode_cuda(p, nullptr).code(), status_code::invalid_argument);  // cu_tokens set
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
