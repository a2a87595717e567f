// The `hart` command line: offline generation, tokenization and scoring on
// the CPU engine. `hart <command> --help` explains each command.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "actors/cli/cli_common.h"
#include "actors/cli/cmd_bench.h"
#include "actors/cli/cmd_check_ops.h"
#include "actors/cli/dummy_model.h"
#include "runtime/core/log.h"
#include "runtime/protocol/messages.h"

namespace {

void add_common(CLI::App* cmd, hart::cli::common_options* o) {
  cmd->add_option("-m,--model", o->model_dir, "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--precision", o->precision_name,
                  "exact: fp32 everywhere (matches the HF reference); fp8: FP8 weights and activations, "
                  "FP8 KV and FP4 indexer QDQ as in the official inference code")
      ->check(CLI::IsMember({"exact", "fp8"}))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd->add_flag("--deterministic", o->deterministic,
                "Batch-invariant arithmetic: logits bitwise independent of batching and chunking (slower)");
  cmd->add_flag("--enforce-eager", o->enforce_eager,
                "--device cuda: launch decode steps kernel by kernel instead of replaying CUDA graphs "
                "(same logits; for debugging and profiling)");
}

// generate and serve: random weights at the model's shapes instead of its checkpoint.
void add_load_format(CLI::App* cmd, hart::cli::common_options* o) {
  cmd->add_option("--load-format", o->load_format,
                  "auto: the checkpoint in --model; dummy: random weights at --model's config.json shapes (for "
                  "trying shapes and measuring; the outputs are noise). With --device cuda they are made on the "
                  "device in the serving formats (seconds, no disk); otherwise written as a checkpoint (FP8 + MXFP4 "
                  "as released where the shapes allow, else BF16) to a temporary directory removed at exit")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  cmd->add_option("--num-layers", o->num_layers, "With --load-format dummy: only the config's first N layers (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

// --load-format dummy: the random model's directory replaces --model until the command ends,
// unless the GPU engine in this process makes the weights on the device (`in_process_gpu`).
int with_model(hart::cli::common_options& o, bool in_process_gpu, const std::function<int()>& run) {
  std::unique_ptr<hart::cli::dummy_model> dummy;
  if (o.load_format == "dummy" && !in_process_gpu) {
    auto d = hart::cli::dummy_model::create(o.model_dir, o.num_layers, 1);
    if (!d.ok()) return hart::cli::fail(d.get_status());
    dummy = std::move(*d);
    o.model_dir = dummy->dir();
  } else if (o.load_format != "dummy" && o.num_layers > 0) {
    return hart::cli::fail(hart::invalid_argument("--num-layers needs --load-format dummy"));
  }
  return run();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hart — Hybrid-Attention RunTime for DeepSeek-V4 models (CPU engine)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log", log_level, "Log level: debug, info, warn, error, off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  hart::cli::generate_options gen;
  CLI::App* g = app.add_subcommand("generate", "Generate text from a prompt or chat messages, streamed to stdout");
  add_common(g, &gen.common);
  add_load_format(g, &gen.common);
  g->add_option("--device", gen.common.device, "Run the model on: cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  g->add_option("-p,--prompt", gen.prompt, "Prompt text (sent as one user message unless --raw)");
  g->add_option("--messages", gen.messages_file, "JSON file with chat messages [{\"role\":..,\"content\":..}]")
      ->check(CLI::ExistingFile);
  g->add_option("--system", gen.system, "System prompt placed before the user message");
  g->add_flag("--raw", gen.raw, "Feed --prompt verbatim (BOS + text), without the chat template");
  g->add_option("--thinking", gen.thinking, "Chat thinking mode: none, think (<think>), no_think (</think>)")
      ->check(CLI::IsMember({"none", "think", "no_think"}))
      ->capture_default_str();
  g->add_option("-n,--max-new-tokens", gen.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  g->add_flag("--ignore-eos", gen.ignore_eos, "Keep generating past the end-of-sequence token");
  g->add_option("--temperature", gen.sampling.temperature, "0 = greedy")->capture_default_str();
  g->add_option("--top-k", gen.sampling.top_k, "Sample among the k most likely tokens (0 = off)")->capture_default_str();
  g->add_option("--top-p", gen.sampling.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  g->add_option("--min-p", gen.sampling.min_p, "Drop tokens below min_p * p_max (0 = off)")->capture_default_str();
  g->add_option("--seed", gen.sampling.seed, "Sampling seed")->capture_default_str();

  hart::cli::tokenize_options tok;
  CLI::App* t = app.add_subcommand("tokenize", "Text to token ids, or ids back to text with --decode");
  add_common(t, &tok.common);
  t->add_option("text", tok.text, "Text to encode");
  t->add_option("--decode", tok.decode_ids, "Comma-separated ids to decode instead");
  t->add_flag("--chat", tok.chat, "Encode the text as one user message with the chat template");

  hart::cli::score_options sc;
  CLI::App* s = app.add_subcommand(
      "score", "Teacher-forced logits and per-token log-probs for input_ids [B,S] from a safetensors file");
  add_common(s, &sc.common);
  s->add_option("--device", sc.common.device, "Run the model on: cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  s->add_option("-i,--input", sc.input, "safetensors file with input_ids [B,S] (I64 or I32)")
      ->required()
      ->check(CLI::ExistingFile);
  s->add_option("-o,--out", sc.output, "Output safetensors: logits [B,S,V] F32, logprobs [B,S] F32")->required();
  s->add_option("--prefill-chunk", sc.prefill_chunk, "Feed the prompt in chunks of N tokens (0 = whole)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--decode-from", sc.decode_from,
                "Prefill positions [0,P), then decode one token per step from P (batched across rows)")
      ->check(CLI::NonNegativeNumber);

  hart::cli::cache_plan_options cp;
  CLI::App* c = app.add_subcommand("cache-plan", "KV bytes per token per pool and what fits in a memory budget");
  c->add_option("-m,--model", cp.model_dir, "Checkpoint directory (config.json; the tensors' sizes with --gpu-memory)")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("--memory", cp.memory, "KV memory budget, e.g. 80GiB")->capture_default_str();
  c->add_option("--context", cp.context, "Tokens per sequence, e.g. 1M, 128K")->capture_default_str();
  c->add_option("--kv", cp.precision, "KV entry format: fp8 (584-B FlashMLA entries) or fp32")
      ->check(CLI::IsMember({"fp8", "fp32"}))
      ->capture_default_str();
  c->add_option("--page-size", cp.page_size, "Tokens per page (multiple of 128)")->capture_default_str();
  c->add_option("--gpu-memory", cp.gpu_memory,
                "Also plan one device of this size as `hart serve --device cuda` does (e.g. 140GiB for an H200): the "
                "same memory plan, with the weights and workspaces predicted instead of measured");
  c->add_option("--gpu-memory-fraction", cp.gpu_memory_fraction, "With --gpu-memory: as hart serve's")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  c->add_option("--max-running", cp.max_running, "With --gpu-memory: sequences decoding at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-batch-tokens", cp.max_batch_tokens, "With --gpu-memory: tokens per engine pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--weights", cp.weights,
                "With --gpu-memory: device bytes of the weights (default: the checkpoint's tensor bytes, which the "
                "device holds at least)");
  c->add_option("--num-layers", cp.num_layers,
                "Plan the config's first N layers only (as serve's --load-format dummy --num-layers N; 0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--workspaces", cp.workspaces,
                "With --gpu-memory: device bytes of the activation arena and linear workspaces (hart serve logs the "
                "measured value in its memory plan)")
      ->capture_default_str();

  hart::cli::random_checkpoint_cli_options rc;
  CLI::App* rck = app.add_subcommand(
      "random-checkpoint", "Write a checkpoint of random weights at a config's shapes (loaders and engines at real shapes)");
  rck->add_option("--config", rc.config, "config.json to take the shapes from (e.g. configs/deepseek-v4-flash/config.json)")
      ->required()
      ->check(CLI::ExistingFile);
  rck->add_option("-o,--out", rc.out, "Directory to write (created)")->required();
  rck->add_option("--format", rc.format,
                  "release: as DeepSeek publishes (FP8 e4m3 + 128x128 E8M0 scales, MXFP4 routed experts, BF16 "
                  "rest, sharded with an index); bf16: BF16 linears, one file")
      ->check(CLI::IsMember({"release", "bf16"}))
      ->capture_default_str();
  rck->add_option("--seed", rc.seed, "Seed of the weights (same seed, config and format: same bytes on any machine)")
      ->capture_default_str();
  rck->add_option("--num-layers", rc.num_layers, "Keep only the first N layers of the config (0 = all)")
      ->check(CLI::NonNegativeNumber);
  rck->add_option("--shard-size", rc.shard_size, "release: start a new shard after this many bytes")->capture_default_str();

  auto add_curve = [](CLI::App* cmd, hart::cli::curve_client_options* o) {
    cmd->add_option("--curve-server-key", o->server_key, "The server's Z85 CURVE public key (a server started with "
                    "--curve-secret-key-file)");
    cmd->add_option("--curve-client-key-file", o->client_key_file,
                    "File with this client's Z85 secret key (`hart curve-keygen`), for a server with an allowlist")
        ->check(CLI::ExistingFile);
  };  hart::cli::soak_options so;
  CLI::App* sk = app.add_subcommand("soak", "A long mixed workload (aborts, disconnects, pauses, weight pushes) against a "
                                            "running server; prints what was lost or leaked, exit 1 if anything was");
  sk->add_option("--connect", so.connect, "Server endpoint")->capture_default_str();
  add_curve(sk, &so.curve);
  sk->add_option("--requests", so.requests, "Requests in all")->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  sk->add_option("--users", so.users, "Concurrent clients")->check(CLI::Range(1, 1024))->capture_default_str();
  sk->add_option("--max-prompt-tokens", so.max_prompt_tokens, "Prompts have 1..N random token ids")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  sk->add_option("--max-new-tokens", so.max_new_tokens, "Each request generates 1..N tokens")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  sk->add_option("--vocab", so.vocab, "Prompt ids are drawn from [2, vocab)")->check(CLI::Range(int64_t(3), int64_t(1) << 32))->capture_default_str();
  sk->add_option("--abort-rate", so.abort_rate, "Share of requests aborted mid-stream")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sk->add_option("--disconnect-rate", so.disconnect_rate, "Share of requests whose client drops its connection mid-stream")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sk->add_option("--pause-ms", so.pause_ms, "Pause (in place, retract, abort in turn) and resume this often; 0 = never")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  sk->add_option("--weight-sync-endpoint", so.weight_sync_endpoint, "Push -m's tensors there every --push-ms as new versions");
  sk->add_option("-m,--model", so.model_dir, "Checkpoint pushed with --weight-sync-endpoint");
  sk->add_option("--push-ms", so.push_ms, "Time between weight pushes")->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  sk->add_option("--server-pid", so.server_pid, "Report this process's RSS at start and end (the server)");
  sk->add_option("--timeout-ms", so.timeout_ms, "A request without all its finals after this counts as lost")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  sk->add_option("--seed", so.seed, "Seed of the workload")->capture_default_str();

  std::string keygen_prefix;
  CLI::App* kg = app.add_subcommand("curve-keygen", "Write a CURVE key pair: PREFIX.key (secret, mode 600) and PREFIX.pub");
  kg->add_option("-o,--out", keygen_prefix, "Path prefix of the two files (neither may exist)")->required();

  hart::cli::serve_options sv;
  CLI::App* v = app.add_subcommand("serve", "Serve the model over the ZeroMQ message API (docs/protocol.md)");
  v->set_config("--config", "", "TOML file with any of these options (e.g. configs/serve.toml)");
  add_common(v, &sv.common);
  add_load_format(v, &sv.common);
  v->add_option("--device", sv.common.device,
                "Run the model on: cpu, or cuda (the GPU engine; exact or fp8)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  v->add_option("--bind", sv.bind, "Endpoint to bind; loopback unless --curve-secret-key-file is given")->capture_default_str();
  v->add_option("--curve-secret-key-file", sv.curve_secret_key_file,
                "File with the server's Z85 CURVE secret key (`hart curve-keygen`; mode 600): encrypts the message API "
                "and weight sync, required for non-loopback binds")
      ->check(CLI::ExistingFile);
  v->add_option("--curve-allowed-clients", sv.curve_allowed_clients_file,
                "File of client Z85 public keys, one per line: only they get in (default: any client that knows the "
                "server's public key)")
      ->check(CLI::ExistingFile);
  v->add_option("--page-size", sv.page_size, "KV page size in tokens (multiple of 128)")->capture_default_str();
  v->add_option("--full-pages", sv.full_pages,
                "Full pages (compressed KV; prefix cache). 0: with --device cuda, what --gpu-memory-fraction leaves "
                "after the weights, the SWA pages and every workspace; else 256")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--swa-pages", sv.swa_pages,
                "SWA pages (window KV and compressor rings). 0: with --device cuda, --max-running sequences' windows "
                "and one pass; else 64")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--gpu-memory-fraction", sv.gpu_memory_fraction,
                "--device cuda: the share of the device's memory hart may hold once the KV pool is allocated (weights, "
                "workspaces, KV pages; the rest stays free for CUDA graphs and cuBLAS). A configuration that cannot "
                "fit (--max-context, --max-running, the weights) is refused at startup with the numbers; "
                "`hart cache-plan` prints the plan without a device")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  v->add_flag("--no-prefix-cache", sv.no_prefix_cache, "Do not share prefixes between requests");
  v->add_option("--max-batch-tokens", sv.max_batch_tokens, "Tokens per engine step")->capture_default_str();
  v->add_option("--max-running", sv.max_running, "Sequences decoding at once")->capture_default_str();
  v->add_option("--prefill-chunk", sv.prefill_chunk, "Largest prefill chunk per sequence per step")->capture_default_str();
  v->add_option("--max-context", sv.max_context, "Longest prompt + generation accepted (0 = model limit)")->capture_default_str();
  v->add_flag("--worker-process", sv.worker_process,
              "Run the engine in a separate `hart worker` process; respawn it when it dies");
  v->add_option("--worker-restarts", sv.worker_restarts,
                "How many times a dead worker process is replaced (-1 = always, 0 = never); after that every "
                "generation ends with error (unavailable)")
      ->capture_default_str();
  v->add_option("--worker-timeout-ms", sv.worker_timeout_ms, "A worker that does not answer a step within this is dropped")
      ->capture_default_str();
  v->add_option("--worker-heartbeat-timeout-ms", sv.worker_heartbeat_timeout_ms,
                "A worker process silent this long during a step (it sends a heartbeat every quarter of it while "
                "computing) is dropped as frozen (0 = off)")
      ->capture_default_str();
  v->add_option("--routing-ids-per-message", sv.routing_ids_per_message,
                "Most routing ids (returnRouting) one reply carries; a longer routing is sent in RoutingPart "
                "replies before its final (docs/protocol.md §5.3)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  v->add_flag("--overlap-schedule", sv.overlap_schedule,
              "Plan each decode step's successor before it runs, so the worker starts it without waiting for the "
              "scheduler (one wasted token per sequence that ends; outputs unchanged)");
  v->add_option("--catch-step-us", sv.catch_step_us,
                "The scheduler spins this long around each decode step's expected end to take its result without "
                "a thread wake-up (S1: the gap between steps); a window of twice the step or more spins from the "
                "step's dispatch (no timer to wake up late; one core busy while decoding); 0 = sleep until woken; "
                "-1 = 100000 (the whole step) on 8 or more hardware threads, else 0 (on few cores the spin takes "
                "the model's)")
      ->check(CLI::Range(int64_t(-1), int64_t(100000)))
      ->capture_default_str();
  v->add_option("--slow-reader-ms", sv.slow_reader_ms,
                "A client whose replies wait at the send limit (--send-hwm) and that reads nothing for this long "
                "(or falls 65536 replies behind) is a slow reader: its generations are aborted, their chunks from "
                "then on dropped, and it gets one resource_exhausted error saying so, then each generation's final "
                "(other clients never wait for it; stats slow_clients, replies_dropped_slow)")
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  v->add_option("--max-requests", sv.max_requests,
                "Generations in flight (accepted, not yet finished) across all clients; past it a generate is "
                "refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--max-requests-per-client", sv.max_requests_per_client,
                "Generations in flight per client (a ZeroMQ connection; an HTTP request is its own client); past "
                "it that client's generates are refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--max-prompt-tokens", sv.max_prompt_tokens,
                "Prompt tokens of the generations in flight, all clients: bounds the memory queued prompts hold; a "
                "prompt that would pass it is refused with resource_exhausted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--max-connections", sv.max_connections,
                "Message-API connections open at once; a new one past it is refused at the handshake (the client "
                "sees no server; stats connections_refused, a warning in the log) (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  v->add_option("--send-hwm", sv.send_hwm,
                "Replies ZeroMQ queues for one client before they wait in the server's own queue for it (ZMQ_SNDHWM)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  v->add_option("--weight-sync-endpoint", sv.weight_sync_endpoint,
                "Accept weight updates here (docs/protocol.md §8), e.g. tcp://127.0.0.1:5558; off by default");
  v->add_option("--weight-sync-idle-ms", sv.weight_sync_idle_ms, "Drop a staged weight update silent this long")
      ->capture_default_str();
  v->add_option("--http-bind", sv.http_bind,
                "Also answer HTTP here (docs/http.md: OpenAI and SGLang endpoints, /metrics), e.g. 127.0.0.1:30000 "
                "(port 0: any); off by default; loopback unless --api-key is given");
  v->add_option("--api-key", sv.api_key, "HTTP: require `Authorization: Bearer KEY` (needed to bind beyond loopback)");
  v->add_option("--http-max-body", sv.http_max_body, "HTTP: largest request body (413 beyond)")->capture_default_str();
  v->add_option("--http-threads", sv.http_threads, "HTTP: requests served at once (each stream holds one)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  v->add_option("--served-model-name", sv.served_model_name,
                "HTTP: the model name /v1/models lists and requests may name (default: the model directory's name)");

  hart::cli::worker_options wk;
  CLI::App* w = app.add_subcommand("worker", "Run steps for a `hart serve` scheduler (started by --worker-process)");
  add_common(w, &wk.common);
  w->add_option("--connect", wk.connect, "The server's worker endpoint")->required();
  w->add_option("--device", wk.common.device, "Run the model on: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  w->add_option("--max-context", wk.max_context, "--device cuda: positions per sequence the GPU engine is sized for "
                "(0 = its default, capped by the model)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  w->add_option("--pid-file", wk.pid_file, "Write this process's pid here once the model is loaded");


  hart::cli::client_options cl;
  auto add_connect = [&](CLI::App* cmd) {
    add_curve(cmd, &cl.curve);
    cmd->add_option("--connect", cl.connect, "Server endpoint")->capture_default_str();
    cmd->add_option("--timeout-ms", cl.timeout_ms, "Give up after this long")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))  // ~34 years: deadlines stay in the clock's range
        ->capture_default_str();
    cmd->add_option("--connect-timeout-ms", cl.connect_timeout_ms,
                    "Fail at once if no server answers a health check at --connect within this")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
  };
  // NOTE(client): not CLI::Range, which lets NaN through (every comparison with it is false).
  char temperature_range_text[32];
  std::snprintf(temperature_range_text, sizeof temperature_range_text, "[0, %g]", double(hart::protocol::max_temperature));
  const CLI::Validator temperature_range(
      [range = std::string(temperature_range_text)](std::string& in) {
        float t = 0;
        if (CLI::detail::lexical_cast(in, t) && t >= 0.0f && t <= hart::protocol::max_temperature) return std::string();
        return "Value " + in + " not a number in " + range;
      },
      std::string("FLOAT in ") + temperature_range_text);
  CLI::App* k = app.add_subcommand("client", "JSON lines in (one request per line), JSON lines out (every reply)");
  add_connect(k);
  CLI::App* h = app.add_subcommand("chat", "Interactive streaming chat with a running server (Ctrl-C stops an answer)");
  add_connect(h);
  h->add_option("--system", cl.system, "System prompt");
  h->add_option("-n,--max-new-tokens", cl.max_new_tokens, "Tokens per answer at most")
      ->check(CLI::Range(int64_t(1), int64_t(std::numeric_limits<uint32_t>::max())))
      ->capture_default_str();
  h->add_option("--temperature", cl.temperature, "0 = greedy")->check(temperature_range)->capture_default_str();
  h->add_flag("--ignore-eos", cl.ignore_eos, "Keep generating past the end-of-sequence token (up to --max-new-tokens)");
  CLI::App* st = app.add_subcommand("stats", "Print a running server's metrics (Prometheus text)");
  add_connect(st);

  hart::cli::bench_serve_options bs;
  CLI::App* b = app.add_subcommand("bench-serve", "Load generator against a running server: a concurrency sweep");
  b->add_option("--connect", bs.connect, "Server endpoint")->capture_default_str();
  add_curve(b, &bs.curve);
  // The request fields these become are checked here, so none wraps into its wire type.
  b->add_option("--concurrency", bs.concurrency, "Concurrent users, one summary line each")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  b->add_option("--input-len", bs.input_len, "Prompt tokens")
      ->check(CLI::Range(int64_t(1), int64_t(hart::protocol::max_prompt_tokens)))
      ->capture_default_str();
  b->add_option("--output-len", bs.output_len, "Generated tokens (EOS ignored)")
      ->check(CLI::Range(int64_t(1), int64_t(std::numeric_limits<uint32_t>::max())))
      ->capture_default_str();
  b->add_option("--requests-per-user", bs.requests_per_user, "Requests each user sends back to back")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  b->add_option("--vocab", bs.vocab, "Prompt token ids are drawn from [2, vocab)")
      ->check(CLI::Range(int64_t(3), int64_t(1) << 32))
      ->capture_default_str();
  b->add_option("--seed", bs.seed, "Prompt seed")->capture_default_str();

  hart::cli::push_weights_options pw;
  CLI::App* pu = app.add_subcommand("push-weights", "Push a checkpoint's tensors into a running server as a new weight version");
  pu->add_option("-m,--model", pw.model_dir, "Checkpoint directory (*.safetensors; BF16/F16/F32, I32/I64 tables)")
      ->required()
      ->check(CLI::ExistingDirectory);
  pu->add_option("--endpoint", pw.endpoint, "The server's --weight-sync-endpoint")->required();
  add_curve(pu, &pw.curve);
  pu->add_option("--version", pw.version, "Weight version; above the serving one")->required();
  pu->add_option("--bucket", pw.bucket, "Tensor bytes per bucket (at most 1GiB)")->capture_default_str();
  pu->add_option("--timeout-ms", pw.timeout_ms, "Longest wait for one reply")->capture_default_str();
  pu->add_option("--lanes", pw.lanes, "Connections the buckets go over, received in parallel (0 = a quarter of the cores, 1 to 4)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();

  hart::cli::check_ops_options co;
  CLI::App* ck = app.add_subcommand(
      "check-ops", "Run every op that has a CUDA implementation on fresh random inputs on the CPU reference and on "
                   "the device; one line per op: shape, max abs/rel error, tolerance, PASS/FAIL");
  ck->add_option("--device", co.device, "Backend compared with the CPU reference (needs a CUDA device)")
      ->check(CLI::IsMember({"cuda"}))
      ->capture_default_str();
  ck->add_option("--seed", co.seed, "Input seed (default: fresh; printed so a run can be replayed)")
      ->check(CLI::NonNegativeNumber);
  ck->add_option("--op", co.op, "Only this op's checks (rms_norm, linear, sparse_attention, ...)");

  hart::cli::bench_options bn;
  CLI::App* bh = app.add_subcommand(
      "bench", "Time prefill and decode of a V4-Flash-shaped model (real Flash dims, fewer layers, random FP8 "
               "weights made on the device) on the GPU engine at each batch x context; one table with the memory "
               "floor (bytes moved / 4.15 TB/s) and the ratio beside every time. Contexts are reached by binding "
               "sequences to randomly filled KV pages, not by prefilling");
  bh->add_option("--device", bn.device, "Engine to time (needs a CUDA device)")
      ->check(CLI::IsMember({"cuda"}))
      ->capture_default_str();
  bh->add_option("--config", bn.config_dir, "Directory whose config.json gives the dims (run from the repo root)")
      ->capture_default_str();
  bh->add_option("--layers", bn.layers, "Main layers: SWA, CSA, HCA, CSA, then CSA/HCA alternating")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bh->add_option("--hash-layers", bn.hash_layers, "Leading layers routed by token-id hash (Flash: 3 of 43)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bh->add_option("--batch", bn.batch, "Sequences per step, e.g. 1,8,32")->delimiter(',')->capture_default_str();
  bh->add_option("--context", bn.context, "Tokens already in each sequence, e.g. 4K,256K,1M")
      ->delimiter(',')
      ->capture_default_str();
  bh->add_option("--prec", bn.prec, "fp8: e4m3 weights + 128x128 scales (the checkpoint's format); exact: fp32")
      ->check(CLI::IsMember({"fp8", "exact"}))
      ->capture_default_str();
  bh->add_option("--steps", bn.steps, "Timed decode steps per point (median)")->check(CLI::PositiveNumber)->capture_default_str();
  bh->add_option("--warmup", bn.warmup, "Untimed decode steps first: their routing traces count the touched experts, the last of 2+ captures the CUDA graph")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bh->add_option("--prefill-chunk", bn.prefill_chunk, "Tokens per sequence of the timed prefill call (0 = no prefill rows)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bh->add_option("--prefill-max-tokens", bn.prefill_max_tokens, "Prefill rows only where batch x chunk <= this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bh->add_option("--prefill-reps", bn.prefill_reps, "Timed prefill calls per point (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bh->add_option("--seed", bn.seed, "Weights, KV and token seed")->capture_default_str();
  bh->add_flag("--enforce-eager", bn.enforce_eager,
               "Decode steps launched kernel by kernel (by default each shape is captured once as a CUDA graph and replayed)");
  bh->add_flag("--fp8-cuda-cores", bn.fp8_cuda_cores,
               "Every FP8 linear on CUDA cores, bitwise the CPU's fp8 sums (by default those of 2 rows or more and the routed experts run on tensor cores, mma.sync e4m3)");
  bh->add_option("--fp8-cublaslt-rows", bn.fp8_cublaslt_rows,
                 "FP8 linears of at least this many rows (prefill chunks) run cuBLASLt's block-scaled FP8 GEMM instead of mma.sync: "
                 "faster prefill, but its sums are not exact and the logits move ~3% off DeepSeek's official FP8; 0 = never (what serving runs)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bh->add_option("--experts", bn.experts,
                 "Routed experts' form: mxfp4 (as the release checkpoints ship them, e2m1 + per-32 scales, run as "
                 "W4A8 on tensor cores; fp8 precision with tensor cores only, else fp8) or fp8 (e4m3 + 128x128 scales)")
      ->check(CLI::IsMember({"mxfp4", "fp8"}))
      ->capture_default_str();
  bh->add_flag("--fp32-kv", bn.fp32_kv,
               "Keep window KV and compressed entries as fp32 rows read by the fp32 gathered attention (by default fp8 keeps them as 584-byte FP8 entries read by the tensor-core sparse attention, A1)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One exit code for every usage error, as for every other bad input (CLI11's own are 101-115).
    std::fprintf(stderr, "hart: error: invalid_argument: %s\nRun with --help for more information.\n", e.what());
    return 1;
  }
  hart::log_level lv = hart::log_level::info;
  if (log_level == "debug") lv = hart::log_level::debug;
  if (log_level == "warn") lv = hart::log_level::warn;
  if (log_level == "error") lv = hart::log_level::error;
  if (log_level == "off") lv = hart::log_level::off;
  hart::log_set_level(lv);

  if (*g) return with_model(gen.common, gen.common.device == "cuda", [&] { return hart::cli::run_generate(gen); });
  if (*t) return hart::cli::run_tokenize(tok);
  if (*s) return hart::cli::run_score(sc);
  if (*c) return hart::cli::run_cache_plan(cp);
  if (*rck) return hart::cli::run_random_checkpoint(rc);
  if (*kg) return hart::cli::run_curve_keygen(keygen_prefix);
  if (*sk) return hart::cli::run_soak(so);
  if (*v) {
    const bool in_process_gpu = sv.common.device == "cuda" && !sv.worker_process;
    return with_model(sv.common, in_process_gpu, [&] { return hart::cli::run_serve(sv); });
  }
  if (*w) return hart::cli::run_worker(wk);
  if (*k) return hart::cli::run_client(cl);
  if (*h) return hart::cli::run_chat(cl);
  if (*st) return hart::cli::run_stats(cl);
  if (*b) return hart::cli::run_bench_serve(bs);
  if (*ck) return hart::cli::run_check_ops(co);
  if (*bh) return hart::cli::run_bench(bn);
  if (*pu) return hart::cli::run_push_weights(pw);
  return 2;
}
