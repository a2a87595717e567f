// File: cli/cli_common.h
// What every `hart` subcommand shares: option structs, the options several
// commands take (add_common, add_load_format, add_curve), the engine/tokenizer
// loaders with readable errors, and exit codes (0 ok, 1 runtime error, 2 usage).
// Each cmd_<name>.cpp defines add_<name>_command (its subcommand and options)
// and run_<name> (what it does); main.cpp calls one, parses, then the other.
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/engine.h"
#include "runtime/protocol/messages.h"
#include "runtime/sample/sampler.h"
#include "runtime/text/tokenizer.h"
#include "runtime/worker/engine_factory.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hart::transport {
class client;
}

namespace hart::cli {

/// --model, --precision, --threads, --deterministic, --enforce-eager, --device,
/// --load-format, --num-layers: which engine, on which checkpoint.
using common_options = worker::engine_source;

struct generate_options {
  common_options common;
  std::string prompt;
  std::string messages_file;  // JSON [{"role", "content"}...]
  std::string system;
  bool raw = false;  // feed the prompt as-is, without the chat template
  std::string thinking = "none";
  int64_t max_new_tokens = 64;
  bool ignore_eos = false;
  sampling_params sampling;
};

struct tokenize_options {
  common_options common;
  std::string text;
  std::string decode_ids;  // "1,2,3": decode instead of encode
  bool chat = false;       // wrap the text as one user message
};

struct score_options {
  common_options common;
  std::string input;
  std::string output;
  int64_t prefill_chunk = 0;  // 0 = whole sequence in one call
  int64_t decode_from = -1;   // >= 0: positions from here are fed one token per call
};

struct random_checkpoint_cli_options {
  std::string config;  // a config.json (official or Hugging Face form)
  std::string out;
  std::string format = "release";
  uint64_t seed = 1;
  int64_t num_layers = 0;  // > 0: keep only the first N layers
  std::string shard_size = "4GiB";
  bool bf16_values = false;
};

struct cache_plan_options {
  std::string model_dir;
  std::string memory = "80GiB";
  std::string context = "1M";
  std::string precision = "fp8";
  int64_t page_size = 256;
  // One device, planned as hart serve --device cuda does (runtime/cache/memory_plan.h).
  std::string gpu_memory;  // empty: no device plan
  double gpu_memory_fraction = 0.9;
  int64_t max_running = 64;
  int64_t max_batch_tokens = 1024;  // the GPU engine's pass
  std::string weights;              // empty: the checkpoint's tensor bytes
  std::string workspaces = "2GiB";
  int64_t num_layers = 0;  // > 0: the config's first N layers (as --load-format dummy --num-layers)
};

/// A client command's CURVE options: the server's public key (public, so argv is fine) and
/// this client's secret key file (never argv: `ps` shows it).
struct curve_client_options {
  std::string server_key;       // Z85; empty: no CURVE
  std::string client_key_file;  // empty: a fresh key pair (servers without an allowlist)
};

/// The Z85 keys for transport::client_params / weight_sync_client_params.
status curve_client_keys(const curve_client_options& o, std::string* server_key, std::string* secret_key);

/// Sends control request `q` and returns the reply carrying its tag (an ack, health, stats or
/// weight-version reply), skipping others; the server's error reply for it as a status;
/// unavailable when none arrives within `timeout`.
status_or<protocol::reply> control_call(transport::client& c, const protocol::control_request& q,
                                        std::chrono::milliseconds timeout);
/// The stats entry `name`, or -1 when the reply has none.
double stat_value(const protocol::stats_reply& s, const char* name);

struct serve_options {
  common_options common;
  std::string bind = "tcp://127.0.0.1:5557";
  std::string curve_secret_key_file;  // the server's Z85 secret key; needed beyond loopback
  std::string
      curve_allowed_clients_file;  // client public keys let in (empty: any client with the server's key)
  int64_t page_size = 128;
  int64_t full_pages = 0;  // 0: from --gpu-memory-fraction in-process on the GPU, else 256
  int64_t swa_pages = 0;   // 0: likewise, else 64
  double gpu_memory_fraction =
      0.9;  // in-process GPU engine: the memory plan's budget (runtime/cache/memory_plan.h)
  bool no_prefix_cache = false;
  int64_t max_batch_tokens = 2048;
  int64_t max_running = 64;
  int64_t prefill_chunk = 512;
  int64_t max_context = 0;
  bool worker_process = false;         // run the engine in a spawned `hart worker` (respawned when it dies)
  int64_t worker_timeout_ms = 600000;  // a step the worker does not answer within this fails
  int64_t worker_heartbeat_timeout_ms = 10000;  // a step with no heartbeat for this long fails
  int64_t routing_ids_per_message = 1 << 20;    // longer routings go in RoutingPart replies
  int64_t worker_restarts = -1;            // dead worker processes replaced at most this often; -1 = always
  bool overlap_schedule = false;           // plan each decode step's successor before it runs
  int64_t speculative_tokens = 0;          // drafts per decode step; 0 = off
  std::string speculative_method = "mtp";  // mtp (the checkpoint's MTP block) or ngram (prompt lookup)
  int64_t catch_step_us = -1;  // scheduler spins this long around a decode step's end; -1 = by core count
  int slow_reader_ms =
      10000;  // a client that reads nothing this long at the send limit has its generations aborted
  int send_hwm = 10000;         // replies ZeroMQ queues per client before the server's own per-client queue
  int64_t max_requests = 8192;  // generations in flight, all clients (0 = no limit)
  int64_t max_requests_per_client = 4096;        // generations in flight per client (0 = no limit)
  int64_t max_prompt_tokens = int64_t(1) << 25;  // prompt tokens of the generations in flight (0 = no limit)
  int64_t max_connections =
      4096;  // message-API connections open at once; more are refused at the handshake (0 = no limit)
  std::string weight_sync_endpoint;     // empty: no weight sync; loopback unless curve_secret_key_file
  int64_t weight_sync_idle_ms = 60000;  // a staged update silent this long is dropped
  std::string http_bind;                // empty: no HTTP; host:port, loopback unless api_key
  std::string api_key;                  // HTTP: required as `Authorization: Bearer KEY` when set
  std::string http_max_body = "8MiB";   // larger HTTP request bodies get 413
  int http_threads = 64;                // HTTP requests served at once (a stream holds one)
  std::string served_model_name;        // HTTP `model`; empty: the model directory's name
  std::string role = "both";     // prefill / decode disaggregation (docs/pd.md): prefill, decode or both
  std::string prefill_endpoint;  // --role decode: the prefill server's PD link
  int64_t prefill_timeout_ms = 30000;  // --role decode: a hand-off silent this long fails
  int64_t kv_ack_timeout_ms = 60000;   // --role prefill: pages held for a decode server's answer at most
};

struct push_weights_options {
  std::string model_dir;  // checkpoint whose tensors are pushed
  std::string endpoint;   // the server's --weight-sync-endpoint
  uint64_t version = 0;
  std::string bucket = "128MiB";  // several per lane, so the lanes overlap
  int64_t timeout_ms = 600000;
  int lanes = 0;  // connections; 0 = a quarter of the cores, 1 to 4
  curve_client_options curve;
};

struct worker_options {
  common_options common;
  std::string connect;   // the server's worker endpoint
  std::string pid_file;  // written once the engine is loaded
  int64_t max_context =
      0;  // --device cuda: the GPU engine's positions per sequence (0 = worker::gpu_max_context's default)
};

struct client_options {
  std::string connect = "tcp://127.0.0.1:5557";
  int64_t timeout_ms = 600000;
  int64_t connect_timeout_ms = 5000;  // the server must answer a health check within this
  curve_client_options curve;
  // chat
  std::string system;
  int64_t max_new_tokens = 256;
  float temperature = 0.0f;
  bool ignore_eos = false;
};

struct soak_options {
  std::string connect = "tcp://127.0.0.1:5557";
  curve_client_options curve;
  int64_t requests = 10000;
  int users = 8;
  int64_t max_prompt_tokens = 64;
  int64_t max_new_tokens = 48;
  int64_t vocab = 512;               // prompt ids from [2, vocab)
  double abort_rate = 0.1;           // requests aborted mid-stream
  double disconnect_rate = 0.05;     // requests whose client drops the connection mid-stream
  int64_t pause_ms = 2000;           // pause + resume this often (0: never)
  std::string weight_sync_endpoint;  // push -m's tensors there every push_ms (empty: no pushes)
  std::string model_dir;
  int64_t push_ms = 5000;
  int64_t server_pid = 0;       // read the server's RSS at start and end (0: not)
  int64_t timeout_ms = 120000;  // a request without its finals after this is lost
  int64_t connect_timeout_ms = 5000;
  uint64_t seed = 1;
};

struct bench_serve_options {
  std::string connect = "tcp://127.0.0.1:5557";
  std::vector<int64_t> concurrency = {1, 2, 4, 8};
  int64_t input_len = 128;
  int64_t output_len = 64;
  int64_t requests_per_user = 4;
  int64_t vocab = 512;  // prompt token ids are drawn from [2, vocab)
  uint64_t seed = 1;
  curve_client_options curve;
};

/// "80GiB", "512M", "1M" (binary multiples; a trailing B is allowed when `bytes`).
status_or<int64_t> parse_size(const std::string& text, bool bytes);

status_or<tokenizer> load_tokenizer(const std::string& model_dir);

/// --model, --precision, --threads, --deterministic and --enforce-eager on `cmd`, into `o`.
void add_common(CLI::App* cmd, common_options* o);
/// generate and serve: --load-format and --num-layers (random weights at the model's shapes
/// instead of its checkpoint).
void add_load_format(CLI::App* cmd, common_options* o);
/// A client command's --curve-server-key and --curve-client-key-file.
void add_curve(CLI::App* cmd, curve_client_options* o);

/// Runs `run` with --load-format dummy's random model directory in place of `o.model_dir` until
/// it returns, unless the GPU engine in this process makes the weights on the device
/// (`in_process_gpu`); the exit code of `run`, or 1 when the dummy model cannot be made or
/// --num-layers comes without --load-format dummy.
int with_model(common_options& o, bool in_process_gpu, const std::function<int()>& run);

// Each command: add_<name>_command adds the subcommand to `app` with its options writing
// into `*o` (which must outlive the parse) and returns it; run_<name> runs it, returning the
// exit code.
CLI::App* add_generate_command(CLI::App& app, generate_options* o);
int run_generate(const generate_options& o);
CLI::App* add_tokenize_command(CLI::App& app, tokenize_options* o);
int run_tokenize(const tokenize_options& o);
CLI::App* add_score_command(CLI::App& app, score_options* o);
int run_score(const score_options& o);
CLI::App* add_cache_plan_command(CLI::App& app, cache_plan_options* o);
int run_cache_plan(const cache_plan_options& o);
CLI::App* add_random_checkpoint_command(CLI::App& app, random_checkpoint_cli_options* o);
int run_random_checkpoint(const random_checkpoint_cli_options& o);
/// `prefix`: the key files' path prefix (-o).
CLI::App* add_curve_keygen_command(CLI::App& app, std::string* prefix);
int run_curve_keygen(const std::string& prefix);
CLI::App* add_soak_command(CLI::App& app, soak_options* o);
int run_soak(const soak_options& o);
CLI::App* add_serve_command(CLI::App& app, serve_options* o);
int run_serve(const serve_options& o);
CLI::App* add_worker_command(CLI::App& app, worker_options* o);
int run_worker(const worker_options& o);
// client, chat and stats share one client_options (their connection options are the same).
CLI::App* add_client_command(CLI::App& app, client_options* o);
int run_client(const client_options& o);
CLI::App* add_chat_command(CLI::App& app, client_options* o);
int run_chat(const client_options& o);
CLI::App* add_stats_command(CLI::App& app, client_options* o);
int run_stats(const client_options& o);
CLI::App* add_bench_serve_command(CLI::App& app, bench_serve_options* o);
int run_bench_serve(const bench_serve_options& o);
CLI::App* add_push_weights_command(CLI::App& app, push_weights_options* o);
int run_push_weights(const push_weights_options& o);

/// Prints "hart: error: <status>" to stderr and returns exit code 1.
int fail(const status& s);

}  // namespace hart::cli
