// `hart serve`: the engine behind CAF actors (gateway -> scheduler actor with
// the ShadowRadix cache shard -> worker actor with the CPU engine, the GPU
// engine (--device cuda), or a `hart worker` process), answering the Cap'n
// Proto message API over ZeroMQ, and with --http-bind OpenAI- and SGLang-compatible
// JSON over HTTP (runtime/http, through the same gateway), until SIGINT or SIGTERM.
// This file is the command line's part (options, keys, the model, the worker's
// executor, signals); actors/serving_system wires the actors and sockets.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <future>
#include <thread>
#include <pthread.h>

#include "actors/cli/cli_common.h"
#include "actors/cli/device_executor.h"
#include "actors/cli/dummy_model.h"
#include "actors/serving_system.h"
#include "runtime/core/log.h"
#include "runtime/core/malloc_tuning.h"
#include "runtime/http/http_server.h"
#include "runtime/transport/curve_auth.h"
#include "runtime/worker/serving_loop.h"
#include "runtime/worker_link/remote_worker.h"

namespace hart::cli {

// Freed memory the process keeps mapped with a weight-sync endpoint (runtime/core/malloc_tuning.h):
// about a bucket's frames in flight.
constexpr size_t k_weight_sync_keep_bytes = size_t(1) << 30;
// --catch-step-us -1 on 8+ hardware threads: a window of 100 ms spins through every
// decode step from its dispatch (steps of up to 50 ms), so no timer or thread wake-up
// stands between a step's end and the next (1000 µs around the expected end left
// p99 at 49-177 µs at concurrency 4 on the H200 hosts; the whole step, 34-48: S1 v15).
constexpr int64_t k_auto_catch_step_us = 100000;

worker_link::model_summary model_summary_of(const model_config& cfg, const common_options& o);  // cmd_worker.cpp

int run_serve(const serve_options& o) {
  if (!o.weight_sync_endpoint.empty() && o.worker_process) {
    return fail(unimplemented("--weight-sync-endpoint with --worker-process: the worker process cannot swap weights yet"));
  }
  if (status st = device_usable(o.common.device); !st.ok()) return fail(st);
  // Keys are read before anything loads: a bad key file fails in milliseconds, not after the model.
  std::string curve_secret_key;
  std::vector<std::string> curve_allowed_clients;
  if (!o.curve_secret_key_file.empty()) {
    auto k = transport::curve_key_file_read(o.curve_secret_key_file, /*secret=*/true);
    if (!k.ok()) return fail(k.get_status());
    curve_secret_key = *k;
  }
  if (!o.curve_allowed_clients_file.empty()) {
    if (curve_secret_key.empty()) return fail(invalid_argument("--curve-allowed-clients needs --curve-secret-key-file"));
    auto a = transport::curve_allowlist_read(o.curve_allowed_clients_file);
    if (!a.ok()) return fail(a.get_status());
    curve_allowed_clients = *a;
  }
  // HTTP options are checked before anything loads; the model facts are filled in below.
  http::http_params hp;
  if (!o.http_bind.empty()) {
    hp.bind = o.http_bind;
    hp.api_key = o.api_key;
    auto max_body = parse_size(o.http_max_body, /*bytes=*/true);
    if (!max_body.ok()) return fail(max_body.get_status());
    hp.max_body_bytes = size_t(*max_body);
    hp.threads = o.http_threads;
    hp.model_path = o.common.model_dir;
    hp.model_name = o.served_model_name;
    if (hp.model_name.empty()) {
      std::string dir = o.common.model_dir;
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      hp.model_name = dir.substr(dir.find_last_of('/') + 1);
    }
    if (status st = hp.validate(); !st.ok()) return fail(st);
  }
  const bool gpu = o.common.device == "cuda";
  if (!o.weight_sync_endpoint.empty()) {
    // Before any thread starts: the received frames' pages stay mapped between updates.
    if (status st = malloc_keep_freed_memory(k_weight_sync_keep_bytes); !st.ok()) {
      HART_LOG_WARN("weight sync: %s (every update faults its frames' pages in afresh)", st.to_string().c_str());
    }
  }
  // Every thread started from here on inherits the blocked mask; one thread
  // takes the signals: during startup (a long load) one ends the process at
  // once, exit 1; once serving, it hands the signal to the shutdown below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto serving = std::make_shared<std::atomic<bool>>(false);
  auto stop = std::make_shared<std::promise<int>>();
  std::future<int> stopped = stop->get_future();
  std::thread([stop_signals, serving, stop] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!serving->load()) {
      std::fprintf(stderr, "hart: signal %d during startup: exiting\n", sig);
      std::_Exit(1);
    }
    stop->set_value(sig);
  }).detach();

  // The CPU engine lives in this process unless the model runs on the GPU
  // (then the worker loads it; the server needs only the config).
  std::unique_ptr<engine> eng;
  model_config cfg;
  if (gpu) {
    auto c = o.common.load_format == "dummy" ? dummy_model_config(o.common.model_dir, o.common.num_layers)
                                              : model_config_load(o.common.model_dir);
    if (!c.ok()) return fail(c.get_status());
    cfg = std::move(c).value();
  } else {
    auto e = load_engine(o.common);
    if (!e.ok()) return fail(e.get_status());
    eng = std::move(e).value();
    cfg = eng->config();
  }
  std::unique_ptr<tokenizer> tok;
  if (auto t = load_tokenizer(o.common.model_dir); t.ok()) {
    tok = std::make_unique<tokenizer>(std::move(t).value());
  } else {
    HART_LOG_WARN("no tokenizer (%s): only token-id prompts will be accepted", t.get_status().to_string().c_str());
  }

  sched::serving_params sp;
  sp.cache.page_size = o.page_size;
  // Page counts left 0: the in-process GPU engine's memory plan picks them
  // (make_gpu_executor); everywhere else the fixed defaults.
  const bool planned = gpu && !o.worker_process;
  sp.cache.n_full_pages = o.full_pages > 0 || planned ? o.full_pages : 256;
  sp.cache.n_swa_pages = o.swa_pages > 0 || planned ? o.swa_pages : 64;
  sp.cache.enable_prefix_cache = !o.no_prefix_cache;
  sp.sched.max_batch_tokens = o.max_batch_tokens;
  sp.sched.max_running = o.max_running;
  sp.sched.prefill_chunk = o.prefill_chunk;
  sp.sched.max_context = gpu ? gpu_max_context(cfg, o.max_context) : o.max_context;
  sp = sched::serving_params_for(cfg, sp, tok.get());

  caf::actor_system_config sys_cfg;
  // NOTE(hart): CAF 0.17's default work-stealing pool polls with 50 us sleeps
  // once idle for a moment, which put ~100 us on every mailbox hop between a
  // decode step and the next (docs/perf-notes.md S1); the sharing policy
  // wakes a pool thread through a condition variable instead.
  sys_cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{sys_cfg};
  const auto started = std::chrono::steady_clock::now();
  actors::worker_actor_params wap;
  wap.eng = eng.get();
  wap.cache = sp.cache;
  // What weight sync builds with and the worker swaps: the engine that serves
  // in this process (none with a worker process: swaps are refused above).
  if (eng && !o.worker_process) wap.weights = engine_weight_target(*eng);
  if (o.worker_process) {
    // The worker gets the same model and arithmetic flags; the server keeps only the plan.
    worker_link::remote_worker_params wp;
    wp.config = {sp.cache.page_size, sp.cache.n_full_pages, sp.cache.n_swa_pages};
    wp.expect = model_summary_of(cfg, o.common);
    wp.step_timeout_ms = o.worker_timeout_ms;
    wp.heartbeat_timeout_ms = o.worker_heartbeat_timeout_ms;
    wp.max_restarts = o.worker_restarts;
    wp.spawn_argv = {"/proc/self/exe", "worker", "--model", o.common.model_dir, "--precision", o.common.precision_name,
                     "--threads", std::to_string(o.common.threads), "--device", o.common.device};
    if (gpu) wp.spawn_argv.insert(wp.spawn_argv.end(), {"--max-context", std::to_string(sp.sched.max_context)});
    if (o.common.deterministic) wp.spawn_argv.push_back("--deterministic");
    if (o.common.enforce_eager) wp.spawn_argv.push_back("--enforce-eager");
    wp.on_spawn = [](int64_t pid) {
      std::printf("hart: worker pid %lld\n", (long long)pid);
      std::fflush(stdout);
    };
    wap.make_executor = [wp]() -> status_or<std::unique_ptr<sched::step_executor>> {
      HART_ASSIGN_OR_RETURN(auto rw, worker_link::remote_worker::start(wp));
      return std::unique_ptr<sched::step_executor>(std::move(rw));
    };
    wap.no_swap_reason = "the engine runs in a worker process (--worker-process)";
  } else if (gpu) {
    // Loaded here, before the server answers: a load error ends the startup.
    std::shared_ptr<weight_target> gpu_weights;
    gpu_serving_sizes sizes;
    sizes.max_context = sp.sched.max_context;
    sizes.max_running = sp.sched.max_running;
    sizes.memory_fraction = o.gpu_memory_fraction;
    auto ex = make_gpu_executor(o.common, &sp.cache, sizes, &gpu_weights);
    if (!ex.ok()) return fail(ex.get_status());
    wap.cache = sp.cache;  // the pages the plan chose
    wap.weights = std::move(gpu_weights);  // shares the engine with the executor
    auto held = std::make_shared<std::unique_ptr<sched::step_executor>>(std::move(ex).value());
    wap.make_executor = [held]() -> status_or<std::unique_ptr<sched::step_executor>> { return std::move(*held); };
  }
  actors::serving_system_params ssp;
  ssp.serving = sp;
  ssp.cfg = cfg;
  ssp.tok = tok.get();
  ssp.worker = std::move(wap);
  ssp.started = started;
  ssp.overlap = o.overlap_schedule;
  ssp.catch_step = std::chrono::microseconds(
      o.catch_step_us >= 0 ? o.catch_step_us : std::thread::hardware_concurrency() >= 8 ? k_auto_catch_step_us : 0);
  ssp.message_api.endpoint = o.bind;
  ssp.message_api.curve_secret_key = curve_secret_key;
  ssp.message_api.curve_allowed_clients = curve_allowed_clients;
  ssp.message_api.max_connections = o.max_connections;
  ssp.message_api.stall_timeout_ms = o.slow_reader_ms;
  ssp.message_api.send_hwm = o.send_hwm;
  ssp.gateway.vocab_size = cfg.vocab_size;
  ssp.gateway.max_routing_ids = o.routing_ids_per_message;
  ssp.gateway.max_context = sp.sched.max_context;
  ssp.gateway.max_requests = o.max_requests;
  ssp.gateway.max_requests_per_client = o.max_requests_per_client;
  ssp.gateway.max_prompt_tokens = o.max_prompt_tokens;
  ssp.weight_sync.endpoint = o.weight_sync_endpoint;
  ssp.weight_sync.curve_secret_key = curve_secret_key;
  ssp.weight_sync.curve_allowed_clients = curve_allowed_clients;
  ssp.weight_sync_idle = std::chrono::milliseconds(o.weight_sync_idle_ms);
  if (!o.http_bind.empty()) {
    hp.max_context = sp.sched.max_context > 0 ? sp.sched.max_context : cfg.max_position;  // 0: the model's
    hp.server_args = {{"model_path", o.common.model_dir},
                      {"tokenizer_path", o.common.model_dir},
                      {"served_model_name", hp.model_name},
                      {"device", o.common.device},
                      {"precision", o.common.precision_name},
                      {"load_format", o.common.load_format},
                      {"context_length", hp.max_context},
                      {"page_size", sp.cache.page_size},
                      {"full_pages", sp.cache.n_full_pages},
                      {"swa_pages", sp.cache.n_swa_pages},
                      {"disable_radix_cache", o.no_prefix_cache},
                      {"max_running_requests", sp.sched.max_running},
                      {"max_prefill_tokens", sp.sched.max_batch_tokens},
                      {"chunked_prefill_size", sp.sched.prefill_chunk},
                      {"tp_size", 1},
                      {"dp_size", 1},
                      {"ep_size", 1},
                      {"worker_process", o.worker_process},
                      {"deterministic", o.common.deterministic},
                      {"http_bind", o.http_bind},
                      {"message_api", o.bind},
                      {"weight_sync_endpoint", o.weight_sync_endpoint},
                      {"model_summary", cfg.summary()}};
    hp.eos_token_id = sp.sched.eos_token_id;
    hp.tok = tok.get();
    ssp.http = hp;
  }
  auto serving_system = actors::serving_system::start(sys, std::move(ssp));
  if (!serving_system.ok()) return fail(serving_system.get_status());
  const std::unique_ptr<actors::serving_system> serving_actors = std::move(serving_system).value();  // before sys
  if (!o.weight_sync_endpoint.empty()) std::printf("hart: weight sync on %s\n", serving_actors->weight_sync_endpoint().c_str());
  if (!o.http_bind.empty()) std::printf("hart: http on %s\n", serving_actors->http_endpoint().c_str());
  serving->store(true);  // before the line clients wait for: a signal after it shuts down in order
  std::printf("hart: serving %s on %s\n", o.common.model_dir.c_str(), serving_actors->endpoint().c_str());
  std::fflush(stdout);

  HART_LOG_INFO("signal %d: shutting down", stopped.get());
  return 0;
}

}  // namespace hart::cli
