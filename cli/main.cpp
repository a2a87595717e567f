// The `hart` command line: offline generation, tokenization and scoring, the
// server and its clients. `hart <command> --help` explains each command; each
// cmd_<name>.cpp adds its subcommand and options (add_<name>_command) and runs
// it (run_<name>); this file parses and dispatches.
#include "cli/cli_common.h"
#include "cli/cmd_bench.h"
#include "cli/cmd_check_ops.h"
#include "runtime/core/log.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  namespace cli = hart::cli;
  CLI::App app{"hart — Hybrid-Attention RunTime for DeepSeek-V4 models (CPU engine)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log", log_level, "Log level: debug, info, warn, error, off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  // The order here is the order `hart --help` lists the commands in.
  cli::generate_options gen;
  CLI::App* g = cli::add_generate_command(app, &gen);
  cli::tokenize_options tok;
  CLI::App* t = cli::add_tokenize_command(app, &tok);
  cli::score_options sc;
  CLI::App* s = cli::add_score_command(app, &sc);
  cli::cache_plan_options cp;
  CLI::App* c = cli::add_cache_plan_command(app, &cp);
  cli::random_checkpoint_cli_options rc;
  CLI::App* rck = cli::add_random_checkpoint_command(app, &rc);
  cli::soak_options so;
  CLI::App* sk = cli::add_soak_command(app, &so);
  std::string keygen_prefix;
  CLI::App* kg = cli::add_curve_keygen_command(app, &keygen_prefix);
  cli::serve_options sv;
  CLI::App* v = cli::add_serve_command(app, &sv);
  cli::worker_options wk;
  CLI::App* w = cli::add_worker_command(app, &wk);
  cli::client_options cl;  // client, chat and stats
  CLI::App* k = cli::add_client_command(app, &cl);
  CLI::App* h = cli::add_chat_command(app, &cl);
  CLI::App* st = cli::add_stats_command(app, &cl);
  cli::bench_serve_options bs;
  CLI::App* b = cli::add_bench_serve_command(app, &bs);
  cli::push_weights_options pw;
  CLI::App* pu = cli::add_push_weights_command(app, &pw);
  cli::check_ops_options co;
  CLI::App* ck = cli::add_check_ops_command(app, &co);
  cli::bench_options bn;
  CLI::App* bh = cli::add_bench_command(app, &bn);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One exit code for every usage error, as for every other bad input (CLI11's own are 101-115).
    std::fprintf(stderr, "hart: error: invalid_argument: %s\nRun with --help for more information.\n",
                 e.what());
    return 1;
  }
  hart::log_level lv = hart::log_level::info;
  if (log_level == "debug") lv = hart::log_level::debug;
  if (log_level == "warn") lv = hart::log_level::warn;
  if (log_level == "error") lv = hart::log_level::error;
  if (log_level == "off") lv = hart::log_level::off;
  hart::log_set_level(lv);

  if (*g)
    return cli::with_model(gen.common, gen.common.device == "cuda", [&] { return cli::run_generate(gen); });
  if (*t) return cli::run_tokenize(tok);
  if (*s) return cli::run_score(sc);
  if (*c) return cli::run_cache_plan(cp);
  if (*rck) return cli::run_random_checkpoint(rc);
  if (*kg) return cli::run_curve_keygen(keygen_prefix);
  if (*sk) return cli::run_soak(so);
  if (*v) {
    const bool in_process_gpu = sv.common.device == "cuda" && !sv.worker_process;
    return cli::with_model(sv.common, in_process_gpu, [&] { return cli::run_serve(sv); });
  }
  if (*w) return cli::run_worker(wk);
  if (*k) return cli::run_client(cl);
  if (*h) return cli::run_chat(cl);
  if (*st) return cli::run_stats(cl);
  if (*b) return cli::run_bench_serve(bs);
  if (*ck) return cli::run_check_ops(co);
  if (*bh) return cli::run_bench(bn);
  if (*pu) return cli::run_push_weights(pw);
  return 2;
}
