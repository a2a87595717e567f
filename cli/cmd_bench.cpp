// `hart bench`: builds a V4-Flash-shaped model (real Flash dims from
// configs/deepseek-v4-flash, fewer layers, random weights in the checkpoint's
// formats, runtime/gpu/bench_model.h) on the GPU engine and times prefill and
// decode at each (batch, context), printing one table with the floor (bytes
// the step must move / 4.15 TB/s + one launch) beside every time.
//
// Contexts are reached by a shortcut, not by prefilling: sequences are bound
// (gpu_engine::bind_pages) to pages of a KV pool filled with random values,
// at the length the point needs, so 1M-token contexts cost no prefill time.
// NOTE(bench): step times are host wall-clock around gpu_engine::forward,
// which returns after its stream has finished; the v1 engine's host metadata
// work between kernels is part of its step, and events on its (internal)
// stream would not bracket the host work before the first kernel.
#include "cli/cmd_bench.h"

#include "cli/bench_floor.h"
#include "cli/cli_common.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#ifdef HART_CUDA
#include "runtime/gpu/bench_fill.h"
#include "runtime/gpu/bench_model.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/kv_pool.h"

#include <cuda_runtime.h>
#endif

namespace hart::cli {
namespace {

#ifdef HART_CUDA

constexpr int64_t k_page = 256;                         // tokens per KV page
constexpr int64_t k_headroom_bytes = int64_t(6) << 30;  // arena + cuBLASLt workspace, left out of the pool

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

struct row {
  const char* mode;
  int64_t batch, context;
  double time_us, floor_us, experts, weight_bytes, kv_bytes, tokens;
};

void print_row(const row& r) {
  std::printf("| %-7s | %5lld | %8lld | %10.1f | %9.1f | %5.2f | %10.0f | %7.1f | %7.3f | %7.3f |\n", r.mode,
              (long long)r.batch, (long long)r.context, r.time_us, r.floor_us, r.time_us / r.floor_us,
              r.tokens / (r.time_us * 1e-6), r.experts, r.weight_bytes / 1e9, r.kv_bytes / 1e9);
  std::fflush(stdout);
}

class bench_runner {
 public:
  bench_runner(const bench_options& o, const model_config& cfg, gpu_engine& eng, double launch_us,
               int64_t swa_per_seq, bool mxfp4_experts)
      : o_(o),
        cfg_(cfg),
        eng_(eng),
        launch_us_(launch_us),
        bytes_(bench_model_bytes_of(cfg, mxfp4_experts)),
        rng_(uint32_t(o.seed)),
        swa_per_seq_(swa_per_seq) {}

  // Sequences b < B bound at `n_computed` positions with pages up to `end`; the
  // window pages a forward still reads are live, older ones are not (-1).
  std::vector<sequence_state> bind(int64_t B, int64_t n_computed, int64_t end) {
    const int64_t n_pages = (end + k_page - 1) / k_page;
    const int64_t first_live =
        std::max<int64_t>(0, n_computed - std::max<int64_t>(cfg_.window, 2 * cfg_.csa_rate)) / k_page;
    std::vector<sequence_state> seqs;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t> full(n_pages), swa(n_pages, -1);
      for (int64_t p = 0; p < n_pages; ++p) full[p] = int32_t(b * n_pages + p);
      for (int64_t p = first_live; p < n_pages; ++p) swa[p] = int32_t(b * swa_per_seq_ + (p - first_live));
      seqs.push_back(eng_.bind_pages(full, swa, n_computed));
    }
    return seqs;
  }

  // One forward of `n` random tokens per sequence; µs, and the distinct routed
  // experts summed over layers when `experts` is given (from the routing trace).
  status step(std::vector<sequence_state>& seqs, int64_t n, double* us, double* experts) {
    std::vector<batch_item> items;
    std::uniform_int_distribution<int32_t> tok(2, int32_t(cfg_.vocab_size - 1));
    for (sequence_state& s : seqs) {
      batch_item it{&s, std::vector<int32_t>(size_t(n)), logits_request::last};
      for (int32_t& t : it.tokens) t = tok(rng_);
      items.push_back(std::move(it));
    }
    forward_trace tr;
    const auto t0 = std::chrono::steady_clock::now();
    HART_RETURN_IF_ERROR(eng_.forward(items, &logits_, experts ? &tr : nullptr));
    *us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (experts) {
      *experts = 0;
      for (const auto& [il, ids] : tr.experts)
        *experts += double(std::set<int32_t>(ids.begin(), ids.end()).size());
    }
    return {};
  }

  status decode(int64_t B, int64_t C, row* r) {
    const int64_t n_steps = o_.warmup + o_.steps;
    std::vector<sequence_state> seqs = bind(B, C - n_steps, C);
    std::vector<double> times, experts;
    for (int64_t i = 0; i < n_steps; ++i) {
      double us = 0, e = 0;
      // The last of 2+ warm-up steps runs untraced, as the timed ones: it captures their CUDA graph.
      const bool traced = i < std::max<int64_t>(1, o_.warmup - 1);
      HART_RETURN_IF_ERROR(step(seqs, 1, &us, traced ? &e : nullptr));
      if (traced) experts.push_back(e);
      if (i >= o_.warmup) times.push_back(us);
    }
    const double e = median(experts);
    const double w = bytes_.dense_bytes + e * bytes_.expert_bytes + bytes_.head_bytes;
    const double kv = double(B) * bench_kv_read_bytes(cfg_, C);
    *r = {"decode", B, C, median(times), bench_floor_us(w + kv, launch_us_), e, w, kv, double(B)};
    return {};
  }

  // Every sequence prefills [C - chunk, C) in one call on top of bound KV. The
  // floor is the larger of bytes (weights once, each sequence's KV once) and
  // the linears' FLOPs at the FP8 rate (attention and indexer FLOPs not counted).
  status prefill(int64_t B, int64_t C, row* r) {
    const int64_t n = o_.prefill_chunk;
    std::vector<double> times, experts;
    for (int64_t i = 0; i < 1 + o_.prefill_reps; ++i) {
      std::vector<sequence_state> seqs = bind(B, C - n, C);
      double us = 0, e = 0;
      HART_RETURN_IF_ERROR(step(seqs, n, &us, i == 0 ? &e : nullptr));
      (i == 0 ? experts : times).push_back(i == 0 ? e : us);
    }
    const double e = experts[0], T = double(B * n);
    const double w = bytes_.dense_bytes + e * bytes_.expert_bytes + bytes_.head_bytes;
    const double kv = double(B) * bench_kv_read_bytes(cfg_, C);
    const double flops =
        2 * T * (bytes_.dense_params + double(cfg_.n_activated_experts) * bytes_.expert_params) +
        2 * double(B) * bytes_.head_params;
    const double floor =
        std::max(bench_floor_us(w + kv, launch_us_), flops / k_h200_fp8_flop_per_s * 1e6 + launch_us_);
    *r = {"prefill", B, C, median(times), floor, e, w, kv, T};
    return {};
  }

 private:
  const bench_options& o_;
  const model_config& cfg_;
  gpu_engine& eng_;
  double launch_us_;
  bench_model_bytes bytes_;
  std::mt19937 rng_;
  int64_t swa_per_seq_;
  std::vector<float> logits_;  // reused across steps, as a serving worker reuses its own
};

int run_device(const bench_options& o, const model_config& cfg, precision prec,
               const std::vector<int64_t>& contexts) {
  auto launch = gpu::bench_empty_launch_us(200);
  if (!launch.ok()) return fail(launch.get_status());
  const int64_t B_max = *std::max_element(o.batch.begin(), o.batch.end());
  const int64_t C_max = *std::max_element(contexts.begin(), contexts.end());
  const int64_t margin = std::max(o.warmup + o.steps, o.prefill_chunk);  // positions bound below C
  if (C_max > cfg.max_position) {
    return fail(invalid_argument("bench: --context %lld is past max_position_embeddings %lld",
                                 (long long)C_max, (long long)cfg.max_position));
  }

  gpu_engine_params p;
  p.base.model_dir = "hart bench (random weights)";
  p.base.prec = prec;
  p.base.page_size = k_page;
  p.max_batch_tokens = std::max<int64_t>(B_max, 512);
  p.max_context = C_max;
  p.fp8_tensor_cores = !o.fp8_cuda_cores;
  p.fp8_cublaslt_rows = o.fp8_cublaslt_rows;
  p.fp8_kv_entries = !o.fp32_kv;
  if (o.enforce_eager) p.decode = gpu_engine_params::decode_launch::eager;

  // Page sizes of this model's pool, then as many full pages as the device holds.
  size_t one = 0, two = 0;
  {
    const bool entries = gpu_kv_entries(p, cfg);
    auto a = gpu::kv_pool::create(cfg, k_page, 1, 1, entries);
    auto b = gpu::kv_pool::create(cfg, k_page, 2, 1, entries);
    if (!a.ok()) return fail(a.get_status());
    if (!b.ok()) return fail(b.get_status());
    one = a->bytes();
    two = b->bytes();
  }
  const int64_t full_page_bytes = int64_t(two - one), swa_page_bytes = int64_t(one) - full_page_bytes;
  const int64_t swa_per_seq =
      (std::max<int64_t>(cfg.window, 2 * cfg.csa_rate) + margin + k_page - 1) / k_page + 1;

  std::printf("bench: %s\n", cfg.summary().c_str());
  std::printf("bench: precision %s, page %lld tokens, empty-kernel launch %.2f us (median of 200)\n",
              precision_name(prec), (long long)k_page, *launch);
  const bool mxfp4 = o.experts == "mxfp4" && prec == precision::fp8 && p.fp8_tensor_cores &&
                     cfg.hidden_size % 128 == 0 && cfg.moe_inter_dim % 128 == 0;
  auto weights = gpu::bench_weights_make(cfg, prec, o.seed, mxfp4);
  if (!weights.ok()) return fail(weights.get_status());
  std::printf("bench: weights on the device %.2f GiB (routed experts %s)\n",
              double(weights->bytes) / double(1 << 30),
              mxfp4                    ? "MXFP4"
              : prec == precision::fp8 ? "FP8"
                                       : "fp32");
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  int64_t want_full = 0;
  for (int64_t B : o.batch) {
    for (int64_t C : contexts) want_full = std::max(want_full, B * ((C + k_page - 1) / k_page));
  }
  const int64_t n_swa = B_max * swa_per_seq;
  const int64_t budget = int64_t(free_bytes) - k_headroom_bytes - n_swa * swa_page_bytes;
  const int64_t n_full = std::min(want_full, budget / full_page_bytes);
  if (n_full < 1)
    return fail(resource_exhausted("bench: no device memory left for the KV pool after the weights"));

  p.full_pages = n_full;
  p.swa_pages = n_swa;
  auto eng = gpu_engine::load(p, cfg, std::move(*weights));
  if (!eng.ok()) return fail(eng.get_status());
  if (status st = (*eng)->kv_fill_random(o.seed); !st.ok()) return fail(st);
  std::printf(
      "bench: device %.2f GiB in use (weights, KV pool of %lld full + %lld SWA pages, arena); KV: random "
      "values, sequences bound at each context (no prefill)\n",
      double((*eng)->device_bytes()) / double(1 << 30), (long long)n_full, (long long)n_swa);
  std::printf(
      "\n| mode    | batch |  context |  step (us) | floor(us) | ratio |   tokens/s | experts | W (GB)  | KV "
      "(GB) |\n");
  std::printf(
      "|---------|-------|----------|------------|-----------|-------|------------|---------|---------|------"
      "---|\n");

  bench_runner run(o, cfg, **eng, *launch, swa_per_seq, mxfp4);
  std::vector<std::string> notes;
  for (int64_t C : contexts) {
    for (int64_t B : o.batch) {
      const int64_t need = B * ((C + k_page - 1) / k_page);
      if (need > n_full) {
        notes.push_back("batch " + std::to_string(B) + " at context " + std::to_string(C) +
                        ": skipped, needs " + std::to_string(need) + " full KV pages, the pool holds " +
                        std::to_string(n_full));
        continue;
      }
      if (C <= margin) {
        notes.push_back("context " + std::to_string(C) + ": skipped, must exceed " + std::to_string(margin));
        continue;
      }
      row r{};
      if (o.prefill_chunk > 0 && B * o.prefill_chunk <= o.prefill_max_tokens) {
        if (status st = run.prefill(B, C, &r); !st.ok()) return fail(st);
        print_row(r);
      }
      if (status st = run.decode(B, C, &r); !st.ok()) return fail(st);
      print_row(r);
    }
  }
  std::printf(
      "\nfloor = (weights touched + KV read) / %.2f TB/s + one launch; prefill: max of that and the linears' "
      "FLOPs / %.0f TFLOP/s (FP8 datasheet). experts = distinct routed experts touched, summed over layers "
      "(routing trace of the warm-up steps). W: attention + indexer + compressors + router + shared expert "
      "+ touched experts + LM head (bf16); KV: FP8 layout (584-B entries, 132-B indexer keys).\n",
      k_h200_copy_bytes_per_s / 1e12, k_h200_fp8_flop_per_s / 1e12);
  if (o.prefill_chunk > 0) {
    std::printf(
        "prefill rows: %lld tokens per sequence in one call, batch x chunk <= %lld; median of %lld calls.\n",
        (long long)o.prefill_chunk, (long long)o.prefill_max_tokens, (long long)o.prefill_reps);
  }
  std::printf("decode rows: median of %lld steps after %lld warm-up steps; %s.\n", (long long)o.steps,
              (long long)o.warmup,
              o.enforce_eager ? "kernels launched one by one (--enforce-eager)"
                              : ("replayed CUDA graphs, " + std::to_string((*eng)->decode_graphs()) +
                                 " captured (one per batch and context bucket, in the last warm-up step)")
                                    .c_str());
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  return 0;
}

#endif

}  // namespace

CLI::App* add_bench_command(CLI::App& app, bench_options* o) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time prefill and decode of a V4-Flash-shaped model (real Flash dims, fewer layers, random FP8 "
      "weights made on the device) on the GPU engine at each batch x context; one table with the memory "
      "floor (bytes moved / 4.15 TB/s) and the ratio beside every time. Contexts are reached by binding "
      "sequences to randomly filled KV pages, not by prefilling");
  cmd->add_option("--device", o->device, "Engine to time (needs a CUDA device)")
      ->check(CLI::IsMember({"cuda"}))
      ->capture_default_str();
  cmd->add_option("--config", o->config_dir,
                  "Directory whose config.json gives the dims (run from the repo root)")
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "Main layers: SWA, CSA, HCA, CSA, then CSA/HCA alternating")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--hash-layers", o->hash_layers, "Leading layers routed by token-id hash (Flash: 3 of 43)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences per step, e.g. 1,8,32")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens already in each sequence, e.g. 4K,256K,1M")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prec", o->prec,
                  "fp8: e4m3 weights + 128x128 scales (the checkpoint's format); exact: fp32")
      ->check(CLI::IsMember({"fp8", "exact"}))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Timed decode steps per point (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup,
                  "Untimed decode steps first: their routing traces count the touched experts, the last of "
                  "2+ captures the CUDA graph")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "Tokens per sequence of the timed prefill call (0 = no prefill rows)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-max-tokens", o->prefill_max_tokens,
                  "Prefill rows only where batch x chunk <= this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-reps", o->prefill_reps, "Timed prefill calls per point (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Weights, KV and token seed")->capture_default_str();
  cmd->add_flag("--enforce-eager", o->enforce_eager,
                "Decode steps launched kernel by kernel (by default each shape is captured once as a CUDA "
                "graph and replayed)");
  cmd->add_flag("--fp8-cuda-cores", o->fp8_cuda_cores,
                "Every FP8 linear on CUDA cores, bitwise the CPU's fp8 sums (by default those of 2 rows or "
                "more and the routed experts run on tensor cores, mma.sync e4m3)");
  cmd->add_option("--fp8-cublaslt-rows", o->fp8_cublaslt_rows,
                  "FP8 linears of at least this many rows (prefill chunks) run cuBLASLt's block-scaled FP8 "
                  "GEMM instead of mma.sync: "
                  "faster prefill, but its sums are not exact and the logits move ~3% off DeepSeek's "
                  "official FP8; 0 = never (what serving runs)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--experts", o->experts,
         "Routed experts' form: mxfp4 (as the release checkpoints ship them, e2m1 + per-32 scales, run as "
         "W4A8 on tensor cores; fp8 precision with tensor cores only, else fp8) or fp8 (e4m3 + 128x128 "
         "scales)")
      ->check(CLI::IsMember({"mxfp4", "fp8"}))
      ->capture_default_str();
  cmd->add_flag(
      "--fp32-kv", o->fp32_kv,
      "Keep window KV and compressed entries as fp32 rows read by the fp32 gathered attention (by default "
      "fp8 keeps them as 584-byte FP8 entries read by the tensor-core sparse attention, A1)");
  return cmd;
}

int run_bench(const bench_options& o) {
  precision prec;
  if (!precision_parse(o.prec, &prec))
    return fail(invalid_argument("bench: --prec '%s' (fp8 or exact)", o.prec.c_str()));
  std::vector<int64_t> contexts;
  for (const std::string& c : o.context) {
    auto n = parse_size(c, false);
    if (!n.ok()) return fail(status(n.get_status().code(), "bench: --context " + n.get_status().message()));
    contexts.push_back(*n);
  }
  for (int64_t b : o.batch) {
    if (b < 1) return fail(invalid_argument("bench: --batch %lld must be >= 1", (long long)b));
  }
  if (o.steps < 1 || o.warmup < 1 || o.prefill_reps < 1 || o.prefill_chunk < 0) {
    return fail(
        invalid_argument("bench: --steps, --warmup and --prefill-reps must be >= 1, --prefill-chunk >= 0"));
  }
  if (o.layers < 1) return fail(invalid_argument("bench: --layers %lld must be >= 1", (long long)o.layers));
  if (o.hash_layers < 0 || o.hash_layers > o.layers) {
    return fail(
        invalid_argument("bench: --hash-layers %lld must be in [0, --layers]", (long long)o.hash_layers));
  }
  auto cfg = model_config_load_layers(o.config_dir, o.layers, o.hash_layers);
  if (!cfg.ok()) {
    return fail(status(cfg.get_status().code(), "bench: " + cfg.get_status().message() +
                                                    " (run from the repository root, or pass --config DIR)"));
  }
#ifdef HART_CUDA
  if (!gpu_device_available()) {
    return fail(status(status_code::unavailable,
                       "bench --device cuda: no CUDA device available (run it on the GPU machine)"));
  }
  return run_device(o, *cfg, prec, contexts);
#else
  return fail(status(status_code::unavailable,
                     "bench --device cuda: no CUDA device available (this hart was built without CUDA)"));
#endif
}

}  // namespace hart::cli
