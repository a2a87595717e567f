// `hart serve`: the engine behind CAF actors (gateway -> scheduler actor with
// the ShadowRadix cache shard -> worker actor with the CPU engine, the GPU
// engine (--device cuda), or a `hart worker` process), answering the Cap'n
// Proto message API over ZeroMQ, and with --http-bind OpenAI- and SGLang-compatible
// JSON over HTTP (runtime/http, through the same gateway), until SIGINT or SIGTERM.
// This file is the command line's part (options, keys, the model, the worker's
// executor, signals); actors/serving_system wires the actors and sockets.
#include "actors/serving_system.h"
#include "cli/cli_common.h"
#include "runtime/core/log.h"
#include "runtime/core/malloc_tuning.h"
#include "runtime/http/http_server.h"
#include "runtime/pd/prefill_server.h"
#include "runtime/transport/curve_auth.h"
#include "runtime/worker/dummy_model.h"
#include "runtime/worker/engine_factory.h"
#include "runtime/worker/serving_loop.h"
#include "runtime/worker_link/remote_worker.h"

#include <CLI/CLI.hpp>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <future>
#include <thread>

namespace hart::cli {

// Freed memory the process keeps mapped with a weight-sync endpoint (runtime/core/malloc_tuning.h):
// about a bucket's frames in flight.
constexpr size_t k_weight_sync_keep_bytes = size_t(1) << 30;
// --catch-step-us -1 on 8+ hardware threads: a window of 100 ms spins through every
// decode step from its dispatch (steps of up to 50 ms), so no timer or thread wake-up
// stands between a step's end and the next (1000 µs around the expected end left
// p99 at 49-177 µs at concurrency 4 on the H200 hosts; the whole step, 34-48: S1 v15).
constexpr int64_t k_auto_catch_step_us = 100000;

worker_link::model_summary model_summary_of(const model_config& cfg,
                                            const common_options& o);  // cmd_worker.cpp

CLI::App* add_serve_command(CLI::App& app, serve_options* o) {
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the model over the ZeroMQ message API (docs/protocol.md)");
  cmd->set_config("--config", "", "TOML file with any of these options (e.g. configs/serve.toml)");
  add_common(cmd, &o->common);
  add_load_format(cmd, &o->common);
  cmd->add_option("--device", o->common.device,
                  "Run the model on: cpu, or cuda (the GPU engine; exact or fp8)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--bind", o->bind, "Endpoint to bind; loopback unless --curve-secret-key-file is given")
      ->capture_default_str();
  cmd->add_option("--curve-secret-key-file", o->curve_secret_key_file,
                  "File with the server's Z85 CURVE secret key (`hart curve-keygen`; mode 600): encrypts the "
                  "message API "
                  "and weight sync, required for non-loopback binds")
      ->check(CLI::ExistingFile);
  cmd->add_option(
         "--curve-allowed-clients", o->curve_allowed_clients_file,
         "File of client Z85 public keys, one per line: only they get in (default: any client that knows the "
         "server's public key)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--page-size", o->page_size, "KV page size in tokens (multiple of 128)")
      ->capture_default_str();
  cmd->add_option(
         "--full-pages", o->full_pages,
         "Full pages (compressed KV; prefix cache). 0: with --device cuda, what --gpu-memory-fraction leaves "
         "after the weights, the SWA pages and every workspace; else 256")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--swa-pages", o->swa_pages,
                  "SWA pages (window KV and compressor rings). 0: with --device cuda, --max-running "
                  "sequences' windows "
                  "and one pass; else 64")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--gpu-memory-fraction", o->gpu_memory_fraction,
         "--device cuda: the share of the device's memory hart may hold once the KV pool is allocated "
         "(weights, "
         "workspaces, KV pages; the rest stays free for CUDA graphs and cuBLAS). A configuration that cannot "
         "fit (--max-context, --max-running, the weights) is refused at startup with the numbers; "
         "`hart cache-plan` prints the plan without a device")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Do not share prefixes between requests");
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "Tokens per engine step")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "Sequences decoding at once")->capture_default_str();
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Largest prefill chunk per sequence per step")
      ->capture_default_str();
  cmd->add_option("--max-context", o->max_context, "Longest prompt + generation accepted (0 = model limit)")
      ->capture_default_str();
  cmd->add_flag("--worker-process", o->worker_process,
                "Run the engine in a separate `hart worker` process; respawn it when it dies");
  cmd->add_option(
         "--worker-restarts", o->worker_restarts,
         "How many times a dead worker process is replaced (-1 = always, 0 = never); after that every "
         "generation ends with error (unavailable)")
      ->capture_default_str();
  cmd->add_option("--worker-timeout-ms", o->worker_timeout_ms,
                  "A worker that does not answer a step within this is dropped")
      ->capture_default_str();
  cmd->add_option(
         "--worker-heartbeat-timeout-ms", o->worker_heartbeat_timeout_ms,
         "A worker process silent this long during a step (it sends a heartbeat every quarter of it while "
         "computing) is dropped as frozen (0 = off)")
      ->capture_default_str();
  cmd->add_option(
         "--routing-ids-per-message", o->routing_ids_per_message,
         "Most routing ids (returnRouting) one reply carries; a longer routing is sent in RoutingPart "
         "replies before its final (docs/protocol.md §5.3)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_flag(
      "--overlap-schedule", o->overlap_schedule,
      "Plan each decode step's successor before it runs, so the worker starts it without waiting for the "
      "scheduler (one wasted token per sequence that ends; outputs unchanged)");
  cmd->add_option(
         "--speculative-tokens", o->speculative_tokens,
         "Speculative decoding: each decode step feeds up to this many drafted tokens after the next one "
         "and keeps those the model would have sampled itself, seed for seed, so outputs are unchanged "
         "(bitwise with --deterministic). CPU engine; 0 = off (docs/spec-decode.md)")
      ->check(CLI::Range(int64_t(0), sched::scheduler_params::k_max_speculative_tokens))
      ->capture_default_str();
  cmd->add_option(
         "--speculative-method", o->speculative_method,
         "Where drafts come from: mtp (the checkpoint's MTP block, mtp.0.* tensors, run after each "
         "step) or ngram (prompt lookup: the sequence's last tokens found earlier in it; no weights, "
         "accepted on repeated text and quoted prompts)")
      ->check(CLI::IsMember({"mtp", "ngram"}))
      ->capture_default_str();
  cmd->add_option(
         "--catch-step-us", o->catch_step_us,
         "The scheduler spins this long around each decode step's expected end to take its result without "
         "a thread wake-up (S1: the gap between steps); a window of twice the step or more spins from the "
         "step's dispatch (no timer to wake up late; one core busy while decoding); 0 = sleep until woken; "
         "-1 = 100000 (the whole step) on 8 or more hardware threads, else 0 (on few cores the spin takes "
         "the model's)")
      ->check(CLI::Range(int64_t(-1), int64_t(100000)))
      ->capture_default_str();
  cmd->add_option(
         "--slow-reader-ms", o->slow_reader_ms,
         "A client whose replies wait at the send limit (--send-hwm) and that reads nothing for this long "
         "(or falls 65536 replies behind) is a slow reader: its generations are aborted, their chunks from "
         "then on dropped, and it gets one resource_exhausted error saying so, then each generation's final "
         "(other clients never wait for it; stats slow_clients, replies_dropped_slow)")
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  cmd->add_option(
         "--max-requests", o->max_requests,
         "Generations in flight (accepted, not yet finished) across all clients; past it a generate is "
         "refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--max-requests-per-client", o->max_requests_per_client,
         "Generations in flight per client (a ZeroMQ connection; an HTTP request is its own client); past "
         "it that client's generates are refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--max-prompt-tokens", o->max_prompt_tokens,
         "Prompt tokens of the generations in flight, all clients: bounds the memory queued prompts hold; a "
         "prompt that would pass it is refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option(
         "--max-connections", o->max_connections,
         "Message-API connections open at once; a new one past it is refused at the handshake (the client "
         "sees no server; stats connections_refused, a warning in the log) (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--send-hwm", o->send_hwm,
                  "Replies ZeroMQ queues for one client before they wait in the server's own queue for it "
                  "(ZMQ_SNDHWM)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option(
      "--weight-sync-endpoint", o->weight_sync_endpoint,
      "Accept weight updates here (docs/protocol.md §8), e.g. tcp://127.0.0.1:5558; off by default");
  cmd->add_option("--weight-sync-idle-ms", o->weight_sync_idle_ms,
                  "Drop a staged weight update silent this long")
      ->capture_default_str();
  cmd->add_option(
      "--http-bind", o->http_bind,
      "Also answer HTTP here (docs/http.md: OpenAI and SGLang endpoints, /metrics), e.g. 127.0.0.1:30000 "
      "(port 0: any); off by default; loopback unless --api-key is given");
  cmd->add_option("--api-key", o->api_key,
                  "HTTP: require `Authorization: Bearer KEY` (needed to bind beyond loopback)");
  cmd->add_option("--http-max-body", o->http_max_body, "HTTP: largest request body (413 beyond)")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads, "HTTP: requests served at once (each stream holds one)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option(
         "--role", o->role,
         "Prefill/decode disaggregation (docs/pd.md): both (compute prompts and decode here), prefill "
         "(compute prompts for decode servers: --bind is then the PD link, a ZeroMQ ROUTER; no client "
         "API), or decode (clients talk to it; prompts go to --prefill-endpoint, their KV comes back "
         "and decoding runs here). CPU engine in this process only")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option("--prefill-endpoint", o->prefill_endpoint,
                  "--role decode: the prefill server's endpoint (its --bind), e.g. tcp://127.0.0.1:5560");
  cmd->add_option(
         "--prefill-timeout-ms", o->prefill_timeout_ms,
         "--role decode: a request whose prefill server sends nothing this long (not running, killed, "
         "too slow) fails with unavailable, its pages released")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--kv-ack-timeout-ms", o->kv_ack_timeout_ms,
                  "--role prefill: a prompt's pages wait this long at most for the decode server's kvAck, "
                  "then go to the prefix cache")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option(
      "--served-model-name", o->served_model_name,
      "HTTP: the model name /v1/models lists and requests may name (default: the model directory's name)");
  return cmd;
}

namespace {

// Which options a role takes; refused before anything loads.
status check_role(const serve_options& o) {
  if (o.role == "decode" && o.prefill_endpoint.empty())
    return invalid_argument("--role decode needs --prefill-endpoint (the prefill server's --bind)");
  if (o.role != "decode" && !o.prefill_endpoint.empty())
    return invalid_argument("--prefill-endpoint is for --role decode");
  if (o.role == "both") return {};
  if (o.common.device != "cpu" || o.worker_process) {
    return unimplemented(
        "--role %s: the KV hand-off runs on the CPU engine in the server's process only "
        "(not --device cuda or --worker-process yet)",
        o.role.c_str());
  }
  if (o.role == "prefill" && (!o.weight_sync_endpoint.empty() || !o.http_bind.empty())) {
    return invalid_argument(
        "--role prefill answers decode servers only: no --weight-sync-endpoint or --http-bind");
  }
  return {};
}

// `--role prefill`: the prefill server until a signal (`stopped`).
int run_prefill_role(const serve_options& o, const engine& eng, const sched::serving_params& sp,
                     std::atomic<bool>& serving, std::future<int>& stopped) {
  pd::prefill_server_params pp;
  pp.endpoint = o.bind;
  pp.cache = sp.cache;
  pp.prefill_chunk = sp.sched.prefill_chunk;
  pp.ack_timeout_ms = o.kv_ack_timeout_ms;
  pp.vocab_size = sp.sched.vocab_size;
  auto srv = pd::prefill_server::start(eng, pp);
  if (!srv.ok()) return fail(srv.get_status());
  serving.store(true);
  std::printf("hart: prefill role: prompts from decode servers, KV back in kvChunk frames\n");
  std::printf("hart: serving %s on %s\n", o.common.model_dir.c_str(), (*srv)->endpoint().c_str());
  std::fflush(stdout);
  HART_LOG_INFO("signal %d: shutting down", stopped.get());
  return 0;
}

}  // namespace

int run_serve(const serve_options& o) {
  if (status st = check_role(o); !st.ok()) return fail(st);
  if (!o.weight_sync_endpoint.empty() && o.worker_process) {
    return fail(unimplemented(
        "--weight-sync-endpoint with --worker-process: the worker process cannot swap weights yet"));
  }
  if (status st = worker::device_usable(o.common.device); !st.ok()) return fail(st);
  // Keys are read before anything loads: a bad key file fails in milliseconds, not after the model.
  std::string curve_secret_key;
  std::vector<std::string> curve_allowed_clients;
  if (!o.curve_secret_key_file.empty()) {
    auto k = transport::curve_key_file_read(o.curve_secret_key_file, /*secret=*/true);
    if (!k.ok()) return fail(k.get_status());
    curve_secret_key = *k;
  }
  if (!o.curve_allowed_clients_file.empty()) {
    if (curve_secret_key.empty())
      return fail(invalid_argument("--curve-allowed-clients needs --curve-secret-key-file"));
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
  if (gpu && o.speculative_tokens > 0)
    return fail(
        unimplemented("--speculative-tokens: the GPU engine has no verify pass yet (issue 22; "
                      "docs/spec-decode.md §4.6); serve with --device cpu or without drafts"));
  if (o.speculative_tokens > 0 && o.overlap_schedule)
    HART_LOG_WARN(
        "--overlap-schedule plans nothing ahead while speculating (the drafts depend on the "
        "step before)");
  if (!o.weight_sync_endpoint.empty()) {
    // Before any thread starts: the received frames' pages stay mapped between updates.
    if (status st = malloc_keep_freed_memory(k_weight_sync_keep_bytes); !st.ok()) {
      HART_LOG_WARN("weight sync: %s (every update faults its frames' pages in afresh)",
                    st.to_string().c_str());
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
  auto served = worker::load_served_model(o.common, &eng);
  if (!served.ok()) return fail(served.get_status());
  const model_config cfg = std::move(served).value();
  std::unique_ptr<tokenizer> tok;
  if (auto t = load_tokenizer(o.common.model_dir); t.ok()) {
    tok = std::make_unique<tokenizer>(std::move(t).value());
  } else {
    HART_LOG_WARN("no tokenizer (%s): only token-id prompts will be accepted",
                  t.get_status().to_string().c_str());
  }

  sched::serving_params sp;
  sp.cache.page_size = o.page_size;
  // Page counts left 0: the in-process GPU engine's memory plan picks them
  // (worker::make_gpu_executor); everywhere else the fixed defaults.
  const bool planned = gpu && !o.worker_process;
  sp.cache.n_full_pages = o.full_pages > 0 || planned ? o.full_pages : 256;
  sp.cache.n_swa_pages = o.swa_pages > 0 || planned ? o.swa_pages : 64;
  sp.cache.enable_prefix_cache = !o.no_prefix_cache;
  sp.sched.max_batch_tokens = o.max_batch_tokens;
  sp.sched.max_running = o.max_running;
  sp.sched.prefill_chunk = o.prefill_chunk;
  sp.sched.speculative_tokens = o.speculative_tokens;
  sp.sched.draft_with = o.speculative_method == "mtp" ? sched::scheduler_params::drafter::mtp
                                                      : sched::scheduler_params::drafter::ngram;
  if (o.speculative_tokens > 0 && o.speculative_method == "mtp" && eng && eng->n_mtp_blocks() == 0) {
    return fail(failed_precondition(
        "--speculative-method mtp: %s has no MTP block (mtp.0.* tensors, e.g. 'mtp.0.e_proj.weight'); "
        "use --speculative-method ngram",
        o.common.model_dir.c_str()));
  }
  sp.sched.max_context = gpu ? worker::gpu_max_context(cfg, o.max_context) : o.max_context;
  sp = worker::serving_params_for(cfg, sp, tok.get());
  if (o.role == "prefill") return run_prefill_role(o, *eng, sp, *serving, stopped);

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
    wp.spawn_argv = {"/proc/self/exe", "worker",
                     "--model",        o.common.model_dir,
                     "--precision",    o.common.precision_name,
                     "--threads",      std::to_string(o.common.threads),
                     "--device",       o.common.device};
    if (gpu)
      wp.spawn_argv.insert(wp.spawn_argv.end(), {"--max-context", std::to_string(sp.sched.max_context)});
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
    worker::gpu_serving_sizes sizes;
    sizes.max_context = sp.sched.max_context;
    sizes.max_running = sp.sched.max_running;
    sizes.memory_fraction = o.gpu_memory_fraction;
    auto ex = worker::make_gpu_executor(o.common, &sp.cache, sizes, &gpu_weights);
    if (!ex.ok()) return fail(ex.get_status());
    wap.cache = sp.cache;                  // the pages the plan chose
    wap.weights = std::move(gpu_weights);  // shares the engine with the executor
    auto held = std::make_shared<std::unique_ptr<sched::step_executor>>(std::move(ex).value());
    wap.make_executor = [held]() -> status_or<std::unique_ptr<sched::step_executor>> {
      return std::move(*held);
    };
  }
  actors::serving_system_params ssp;
  ssp.serving = sp;
  ssp.cfg = cfg;
  ssp.tok = tok.get();
  ssp.worker = std::move(wap);
  ssp.started = started;
  ssp.overlap = o.overlap_schedule;
  if (o.role == "decode") {
    ssp.prefill_endpoint = o.prefill_endpoint;
    ssp.prefill_timeout_ms = o.prefill_timeout_ms;
    auto store = eng->make_store(sp.cache.page_size);  // no pages: only its layout
    if (!store.ok()) return fail(store.get_status());
    ssp.kv_layout = (*store)->layout_id();
  }
  ssp.catch_step = std::chrono::microseconds(o.catch_step_us >= 0                       ? o.catch_step_us
                                             : std::thread::hardware_concurrency() >= 8 ? k_auto_catch_step_us
                                                                                        : 0);
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
  const std::unique_ptr<actors::serving_system> serving_actors =
      std::move(serving_system).value();  // before sys
  if (!o.weight_sync_endpoint.empty())
    std::printf("hart: weight sync on %s\n", serving_actors->weight_sync_endpoint().c_str());
  if (!o.http_bind.empty()) std::printf("hart: http on %s\n", serving_actors->http_endpoint().c_str());
  serving->store(true);  // before the line clients wait for: a signal after it shuts down in order
  std::printf("hart: serving %s on %s\n", o.common.model_dir.c_str(), serving_actors->endpoint().c_str());
  std::fflush(stdout);

  HART_LOG_INFO("signal %d: shutting down", stopped.get());
  return 0;
}

}  // namespace hart::cli
