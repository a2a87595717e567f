// `hart cache-plan`: bytes per token per KV pool for a checkpoint's layer
// layout and precision, and how many tokens and sequences fit in a memory
// budget — capacity planning without trial and OOM. With --gpu-memory, also
// the memory plan `hart serve --device cuda` makes for one device (the GPU
// pool's exact pages; weights and workspaces predicted, where serve measures them).
#include "cli/cli_common.h"
#include "runtime/cache/cache_plan.h"
#include "runtime/cache/memory_plan.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_page_layout.h"
#include "runtime/model/tensor_source.h"
#include "runtime/worker/dummy_model.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

namespace hart::cli {

status_or<int64_t> parse_size(const std::string& text, bool bytes) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return invalid_argument("'%s' is not a size", text.c_str());
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (bytes && !unit.empty() && unit.back() == 'b') unit.pop_back();  // "80GiB" / "80GB" → "gi" / "g"
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();           // binary prefixes either way
  double mult = 1;
  if (unit == "k")
    mult = 1024.0;
  else if (unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    return invalid_argument("'%s': unknown unit '%s' (K, M, G, T)", text.c_str(), unit.c_str());
  if (!(v > 0)) return invalid_argument("'%s' must be positive", text.c_str());
  return int64_t(v * mult);
}

namespace {

// The device plan of `hart serve --device cuda` for --gpu-memory, printed.
status print_device_plan(const cache_plan_options& o, const model_config& cfg, int64_t context) {
  HART_ASSIGN_OR_RETURN(const int64_t total, parse_size(o.gpu_memory, true));
  HART_ASSIGN_OR_RETURN(const int64_t workspaces, parse_size(o.workspaces, true));
  int64_t weights = 0;
  if (!o.weights.empty()) {
    HART_ASSIGN_OR_RETURN(weights, parse_size(o.weights, true));
  } else {
    auto src = checkpoint_source_open(o.model_dir);
    if (!src.ok()) {
      return invalid_argument("--gpu-memory: no weights to count in %s (%s); give --weights",
                              o.model_dir.c_str(), src.get_status().message().c_str());
    }
    for (const tensor_entry* t : (*src)->tensors()) weights += int64_t(t->n_bytes);
  }
  // As the GPU engine keeps them (gpu_kv_entries): FP8 entries for fp8 at head_dim 512.
  const bool entries = o.precision == "fp8" && cfg.head_dim == 512;
  HART_ASSIGN_OR_RETURN(const kv_page_layout page, kv_page_layout_make(cfg, o.page_size, entries));
  cache::memory_plan_params p;
  p.device_total = total;
  p.device_free = std::max<int64_t>(total - weights - workspaces, 0);
  p.fraction = o.gpu_memory_fraction;
  p.weights = std::min(weights, total);
  p.workspaces = std::min(workspaces, total - p.weights);
  p.full_page_bytes = page.full_page_bytes();
  p.swa_page_bytes = page.swa_page_bytes();
  p.page_size = o.page_size;
  p.window = cfg.window;
  p.max_context = context;
  p.max_running = o.max_running;
  p.max_batch_tokens = o.max_batch_tokens;
  std::printf(
      "\none device, as hart serve --device cuda plans it (KV %s):\n",
      entries ? "window and compressed entries as 584-B FP8 entries, indexer keys fp32" : "fp32 rows");
  HART_ASSIGN_OR_RETURN(const cache::memory_plan plan, cache::memory_plan_make(p));
  std::printf("%s", plan.describe().c_str());
  return {};
}

}  // namespace

CLI::App* add_cache_plan_command(CLI::App& app, cache_plan_options* o) {
  CLI::App* cmd =
      app.add_subcommand("cache-plan", "KV bytes per token per pool and what fits in a memory budget");
  cmd->add_option("-m,--model", o->model_dir,
                  "Checkpoint directory (config.json; the tensors' sizes with --gpu-memory)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--memory", o->memory, "KV memory budget, e.g. 80GiB")->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens per sequence, e.g. 1M, 128K")->capture_default_str();
  cmd->add_option("--kv", o->precision, "KV entry format: fp8 (584-B FlashMLA entries) or fp32")
      ->check(CLI::IsMember({"fp8", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--page-size", o->page_size, "Tokens per page (multiple of 128)")->capture_default_str();
  cmd->add_option(
      "--gpu-memory", o->gpu_memory,
      "Also plan one device of this size as `hart serve --device cuda` does (e.g. 140GiB for an H200): the "
      "same memory plan, with the weights and workspaces predicted instead of measured");
  cmd->add_option("--gpu-memory-fraction", o->gpu_memory_fraction, "With --gpu-memory: as hart serve's")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "With --gpu-memory: sequences decoding at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "With --gpu-memory: tokens per engine pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option(
      "--weights", o->weights,
      "With --gpu-memory: device bytes of the weights (default: the checkpoint's tensor bytes, which the "
      "device holds at least)");
  cmd->add_option(
         "--num-layers", o->num_layers,
         "Plan the config's first N layers only (as serve's --load-format dummy --num-layers N; 0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--workspaces", o->workspaces,
         "With --gpu-memory: device bytes of the activation arena and linear workspaces (hart serve logs the "
         "measured value in its memory plan)")
      ->capture_default_str();
  return cmd;
}

int run_cache_plan(const cache_plan_options& o) {
  auto cfg = o.num_layers > 0 ? worker::dummy_model_config(o.model_dir, o.num_layers)
                              : model_config_load(o.model_dir);
  if (!cfg.ok()) return fail(cfg.get_status());
  auto memory = parse_size(o.memory, true);
  if (!memory.ok()) return fail(memory.get_status());
  auto context = parse_size(o.context, false);
  if (!context.ok()) return fail(context.get_status());

  cache::cache_plan_params p;
  for (attention_kind k : cfg->layer_kinds) {
    if (k == attention_kind::sliding) ++p.n_swa_layers;
    if (k == attention_kind::csa) ++p.n_csa_layers;
    if (k == attention_kind::hca) ++p.n_hca_layers;
  }
  p.n_mtp_layers = cfg->n_mtp_layers;
  p.head_dim = cfg->head_dim;
  p.rope_dim = cfg->rope_dim;
  p.index_head_dim = cfg->index_head_dim > 0 ? cfg->index_head_dim : 128;
  p.csa_rate = cfg->csa_rate;
  p.hca_rate = cfg->hca_rate;
  p.window = cfg->window;
  p.page_size = o.page_size;
  p.csa_ring = 2 * cfg->csa_rate;
  p.hca_ring = cfg->hca_rate;
  p.precision = o.precision == "fp8" ? cache::kv_precision::fp8 : cache::kv_precision::fp32;
  p.memory_bytes = *memory;
  p.context_len = *context;
  auto plan = cache::cache_plan_make(p);
  if (!plan.ok()) return fail(plan.get_status());
  const cache::cache_plan& c = *plan;
  const double mib = 1024.0 * 1024.0;
  std::printf("model      %s\n", cfg->summary().c_str());
  std::printf("layers     %lld SWA, %lld CSA, %lld HCA, %lld MTP; KV %s; page %lld tokens; window %lld\n",
              (long long)p.n_swa_layers, (long long)p.n_csa_layers, (long long)p.n_hca_layers,
              (long long)p.n_mtp_layers, o.precision.c_str(), (long long)p.page_size, (long long)p.window);
  std::printf("\nbytes per token (all layers)\n");
  std::printf("  C4 KV (CSA)         %10.1f\n", c.c4_kv_bytes_per_token);
  std::printf("  C128 KV (HCA)       %10.1f\n", c.c128_kv_bytes_per_token);
  std::printf("  indexer keys        %10.1f\n", c.indexer_bytes_per_token);
  std::printf("  full pages (sum)    %10.1f   <- grows with context\n", c.full_bytes_per_token);
  std::printf("  SWA KV              %10lld   <- only the last window + margin per sequence\n",
              (long long)c.swa_kv_bytes_per_token);
  std::printf("\npages\n");
  std::printf("  full page           %10.2f MiB\n", c.full_page_bytes / mib);
  std::printf("  SWA page            %10.2f MiB (state rings: CSA %.2f MiB, HCA %.2f MiB)\n",
              c.swa_page_bytes / mib, c.csa_state_bytes_per_swa_page / mib,
              c.hca_state_bytes_per_swa_page / mib);
  std::printf("\nper sequence of %lld tokens: %lld full + %lld SWA pages = %.1f MiB\n",
              (long long)p.context_len, (long long)c.full_pages_per_seq, (long long)c.swa_pages_per_seq,
              c.bytes_per_seq / mib);
  std::printf("in %.1f GiB: %lld sequences of %lld tokens; one sequence could hold %lld tokens\n",
              *memory / (mib * 1024), (long long)c.max_seqs, (long long)p.context_len,
              (long long)c.max_tokens_one_seq);
  std::printf("cache config: n_full_pages %lld, n_swa_pages %lld\n", (long long)c.n_full_pages,
              (long long)c.n_swa_pages);
  if (!o.gpu_memory.empty()) {
    if (status s = print_device_plan(o, *cfg, *context); !s.ok()) return fail(s);
  }
  return 0;
}

}  // namespace hart::cli
