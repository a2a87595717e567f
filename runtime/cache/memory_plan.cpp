#include "runtime/cache/memory_plan.h"

#include "runtime/cache/shadow_radix.h"

#include <cstdio>

namespace hart::cache {
namespace {

double gib(int64_t bytes) {
  return double(bytes) / double(int64_t(1) << 30);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The numbers a refusal names, on one line.
std::string refusal_context(const memory_plan& m) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "device %.2f GiB x fraction %.2f = %.2f GiB; weights %.2f GiB, workspaces %.2f GiB, "
                "others %.2f GiB; KV budget %.2f GiB",
                gib(m.in.device_total), m.in.fraction, gib(m.budget), gib(m.in.weights), gib(m.in.workspaces),
                gib(m.others), gib(m.kv_budget));
  return buf;
}

}  // namespace

status memory_plan_params::validate() const {
  if (device_total <= 0 || device_free < 0 || device_free > device_total) {
    return invalid_argument(
        "memory plan: device total %lld and free %lld bytes (0 <= free <= total, total > 0)",
        (long long)device_total, (long long)device_free);
  }
  if (!(fraction > 0 && fraction <= 1)) {
    return invalid_argument("memory plan: --gpu-memory-fraction %g must be in (0, 1]", fraction);
  }
  if (weights < 0 || workspaces < 0 || weights + workspaces > device_total - device_free) {
    return invalid_argument("memory plan: weights %lld + workspaces %lld bytes exceed the %lld in use",
                            (long long)weights, (long long)workspaces,
                            (long long)(device_total - device_free));
  }
  if (full_page_bytes <= 0 || swa_page_bytes <= 0 || page_size <= 0 || window <= 0) {
    return invalid_argument(
        "memory plan: page bytes (full %lld, swa %lld), page_size %lld and window %lld must be > 0",
        (long long)full_page_bytes, (long long)swa_page_bytes, (long long)page_size, (long long)window);
  }
  if (max_context <= 0 || max_running <= 0 || max_batch_tokens < 0 || n_full_pages < 0 || n_swa_pages < 0) {
    return invalid_argument(
        "memory plan: max_context %lld and max_running %lld must be > 0, max_batch_tokens and "
        "page counts >= 0",
        (long long)max_context, (long long)max_running);
  }
  return {};
}

status_or<memory_plan> memory_plan_make(const memory_plan_params& p) {
  HART_RETURN_IF_ERROR(p.validate());
  memory_plan m;
  m.in = p;
  m.budget = int64_t(p.fraction * double(p.device_total));
  const int64_t in_use = p.device_total - p.device_free;
  m.others = in_use - p.weights - p.workspaces;
  m.kv_budget = m.budget - in_use;
  m.full_pages_per_seq = ceil_div(p.max_context, p.page_size);
  cache_config pages;
  pages.page_size = p.page_size;
  pages.window = p.window;
  m.swa_pages_per_seq = pages.min_swa_pages();
  if (m.kv_budget <= 0) {
    return resource_exhausted(
        "memory plan: nothing is left for the KV cache (%s): raise --gpu-memory-fraction, lower "
        "--max-batch-tokens, or use a device with more memory",
        refusal_context(m).c_str());
  }
  // Every running sequence's window, and a prefill pass's chunk beside them (its tokens' window
  // KV is written before the older pages are released).
  m.n_swa_pages = p.n_swa_pages > 0
                      ? p.n_swa_pages
                      : p.max_running * m.swa_pages_per_seq + ceil_div(p.max_batch_tokens, p.page_size);
  const int64_t swa_bytes = m.n_swa_pages * p.swa_page_bytes;
  if (p.n_full_pages > 0) {
    m.n_full_pages = p.n_full_pages;
  } else {
    m.n_full_pages = swa_bytes < m.kv_budget ? (m.kv_budget - swa_bytes) / p.full_page_bytes : 0;
  }
  m.kv_bytes = m.n_full_pages * p.full_page_bytes + swa_bytes;
  const bool given =
      p.n_full_pages > 0 || p.n_swa_pages > 0;  // else too many SWA pages is the next refusal's case
  if (given && m.kv_bytes > m.kv_budget) {
    return resource_exhausted(
        "memory plan: %lld full pages x %.2f MiB + %lld SWA pages x %.2f MiB = %.2f GiB do "
        "not fit (%s): give fewer pages or raise --gpu-memory-fraction",
        (long long)m.n_full_pages, p.full_page_bytes / 1048576.0, (long long)m.n_swa_pages,
        p.swa_page_bytes / 1048576.0, gib(m.kv_bytes), refusal_context(m).c_str());
  }
  if (m.n_full_pages < m.full_pages_per_seq) {
    return resource_exhausted(
        "memory plan: one sequence of --max-context %lld tokens needs %lld full pages (%.2f GiB) beside %lld "
        "SWA "
        "pages (%.2f GiB: --max-running %lld x %lld + a %lld-token prefill pass); %lld full pages fit (%s): "
        "lower "
        "--max-context, --max-running or --max-batch-tokens, or raise --gpu-memory-fraction",
        (long long)p.max_context, (long long)m.full_pages_per_seq,
        gib(m.full_pages_per_seq * p.full_page_bytes), (long long)m.n_swa_pages, gib(swa_bytes),
        (long long)p.max_running, (long long)m.swa_pages_per_seq, (long long)p.max_batch_tokens,
        (long long)m.n_full_pages, refusal_context(m).c_str());
  }
  m.seqs_at_max_context = m.n_full_pages / m.full_pages_per_seq;
  m.token_capacity = m.n_full_pages * p.page_size;
  return m;
}

std::string memory_plan::describe() const {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  add("device memory %.2f GiB x fraction %.2f = %.2f GiB for hart\n", gib(in.device_total), in.fraction,
      gib(budget));
  add("  weights           %9.2f GiB\n", gib(in.weights));
  add("  workspaces        %9.2f GiB   activations of a %lld-token pass, linear contexts, staging\n",
      gib(in.workspaces), (long long)in.max_batch_tokens);
  add("  others            %9.2f GiB   CUDA context, other processes\n", gib(others));
  add("  KV pages          %9.2f GiB   %lld full x %.2f MiB + %lld SWA x %.2f MiB\n", gib(kv_bytes),
      (long long)n_full_pages, in.full_page_bytes / 1048576.0, (long long)n_swa_pages,
      in.swa_page_bytes / 1048576.0);
  add("  left free         %9.2f GiB   CUDA graphs, cuBLAS (1 - fraction, and what the pages leave)\n",
      gib(in.device_free - kv_bytes));
  add("capacity: %lld tokens in full pages; %lld sequences of --max-context %lld; %lld running (%lld SWA "
      "pages each)\n",
      (long long)token_capacity, (long long)seqs_at_max_context, (long long)in.max_context,
      (long long)in.max_running, (long long)swa_pages_per_seq);
  return out;
}

}  // namespace hart::cache
