// `hart worker`: one engine as a separate process. Loads the CPU engine (the
// GPU engine waits for the server's page counts) and runs the worker side of
// the link (runtime/worker_link/worker_process): hello, an executor of exactly
// the configured pages (the CPU engine's kv_store, or with --device cuda the GPU
// engine with a pool of those pages), then steps until the server's bye;
// `hart serve --worker-process` also kills it when it dies (PR_SET_PDEATHSIG,
// set when spawning).
#include "cli/cli_common.h"
#include "runtime/worker/engine_executor.h"
#include "runtime/worker/engine_factory.h"
#include "runtime/worker_link/worker_process.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace hart::cli {

worker_link::model_summary model_summary_of(const model_config& cfg, const common_options& o) {
  worker_link::model_summary m;
  m.vocab_size = cfg.vocab_size;
  m.hidden_size = cfg.hidden_size;
  m.n_layers = cfg.n_layers;
  m.window = cfg.window;
  m.precision = o.precision_name;
  m.deterministic = o.deterministic;
  return m;
}

CLI::App* add_worker_command(CLI::App& app, worker_options* o) {
  CLI::App* cmd =
      app.add_subcommand("worker", "Run steps for a `hart serve` scheduler (started by --worker-process)");
  add_common(cmd, &o->common);
  cmd->add_option("--connect", o->connect, "The server's worker endpoint")->required();
  cmd->add_option("--device", o->common.device, "Run the model on: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--max-context", o->max_context,
                  "--device cuda: positions per sequence the GPU engine is sized for "
                  "(0 = its default, capped by the model)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--pid-file", o->pid_file, "Write this process's pid here once the model is loaded");
  return cmd;
}

int run_worker(const worker_options& o) {
  if (status st = worker::device_usable(o.common.device); !st.ok()) return fail(st);
  const bool gpu = o.common.device == "cuda";
  // The CPU engine loads now; the GPU engine at configure, when its pool size is known.
  std::unique_ptr<engine> eng;
  auto served = worker::load_served_model(o.common, &eng);
  if (!served.ok()) return fail(served.get_status());
  const model_config cfg = std::move(served).value();
  if (!o.pid_file.empty()) {
    if (FILE* f = std::fopen(o.pid_file.c_str(), "w")) {
      std::fprintf(f, "%d\n", int(getpid()));
      std::fclose(f);
    }
  }
  worker_link::worker_process_params wp;
  wp.connect = o.connect;
  wp.hello.pid = getpid();
  wp.hello.model = model_summary_of(cfg, o.common);
  if (const char* t = std::getenv("HART_WORKER_TOKEN")) {  // from the server that spawned this process
    wp.hello.token = t;
    unsetenv("HART_WORKER_TOKEN");
  }
  wp.make_executor =
      [&](const cache::cache_config& pages) -> status_or<std::unique_ptr<sched::step_executor>> {
    if (gpu) {
      cache::cache_config given = pages;
      worker::gpu_serving_sizes sizes;  // the server's pages, as they are
      sizes.max_context = worker::gpu_max_context(cfg, o.max_context);
      sizes.memory_fraction = 0;
      return worker::make_gpu_executor(o.common, &given, sizes);
    }
    HART_ASSIGN_OR_RETURN(auto ex, worker::engine_executor::on_cpu(*eng, pages));
    return std::unique_ptr<sched::step_executor>(std::move(ex));
  };
  // An error ends the process; the server sees it exit and replaces it.
  if (status st = worker_link::worker_process_run(wp); !st.ok()) return fail(st);
  return 0;
}

}  // namespace hart::cli
