#include "cli/cli_common.h"

#include "runtime/transport/client.h"
#include "runtime/transport/curve_auth.h"
#include "runtime/worker/dummy_model.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <type_traits>
#include <variant>

namespace hart::cli {

int fail(const status& s) {
  std::fprintf(stderr, "hart: error: %s\n", s.to_string().c_str());
  return 1;
}

void add_common(CLI::App* cmd, common_options* o) {
  cmd->add_option("-m,--model", o->model_dir,
                  "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")
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

void add_load_format(CLI::App* cmd, common_options* o) {
  cmd->add_option(
         "--load-format", o->load_format,
         "auto: the checkpoint in --model; dummy: random weights at --model's config.json shapes (for "
         "trying shapes and measuring; the outputs are noise). With --device cuda they are made on the "
         "device in the serving formats (seconds, no disk); otherwise written as a checkpoint (FP8 + MXFP4 "
         "as released where the shapes allow, else BF16) to a temporary directory removed at exit")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  cmd->add_option("--num-layers", o->num_layers,
                  "With --load-format dummy: only the config's first N layers (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void add_curve(CLI::App* cmd, curve_client_options* o) {
  cmd->add_option("--curve-server-key", o->server_key,
                  "The server's Z85 CURVE public key (a server started with "
                  "--curve-secret-key-file)");
  cmd->add_option(
         "--curve-client-key-file", o->client_key_file,
         "File with this client's Z85 secret key (`hart curve-keygen`), for a server with an allowlist")
      ->check(CLI::ExistingFile);
}

int with_model(common_options& o, bool in_process_gpu, const std::function<int()>& run) {
  std::unique_ptr<worker::dummy_model> dummy;
  if (o.load_format == "dummy" && !in_process_gpu) {
    auto d = worker::dummy_model::create(o.model_dir, o.num_layers, 1);
    if (!d.ok()) return fail(d.get_status());
    dummy = std::move(*d);
    o.model_dir = dummy->dir();
  } else if (o.load_format != "dummy" && o.num_layers > 0) {
    return fail(invalid_argument("--num-layers needs --load-format dummy"));
  }
  return run();
}

status curve_client_keys(const curve_client_options& o, std::string* server_key, std::string* secret_key) {
  if (o.server_key.empty()) {
    if (!o.client_key_file.empty())
      return invalid_argument("--curve-client-key-file needs --curve-server-key");
    return {};
  }
  *server_key = o.server_key;
  if (!o.client_key_file.empty()) {
    HART_ASSIGN_OR_RETURN(*secret_key, transport::curve_key_file_read(o.client_key_file, /*secret=*/true));
  }
  return {};
}

status_or<protocol::reply> control_call(transport::client& c, const protocol::control_request& q,
                                        std::chrono::milliseconds timeout) {
  HART_RETURN_IF_ERROR(c.send(protocol::request{q}));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return unavailable("no answer to control request %llu", (unsigned long long)q.tag);
    HART_ASSIGN_OR_RETURN(protocol::reply r, c.receive(left));
    if (const auto* e = std::get_if<protocol::error_reply>(&r); e && e->tag == q.tag)
      return status(e->code, e->message);
    const uint64_t tag = std::visit(
        [](const auto& v) -> uint64_t {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, protocol::ack_reply> || std::is_same_v<T, protocol::health_reply> ||
                        std::is_same_v<T, protocol::stats_reply> ||
                        std::is_same_v<T, protocol::weight_version_reply>) {
            return v.tag;
          } else {
            return 0;
          }
        },
        r);
    if (tag == q.tag) return r;
  }
}

double stat_value(const protocol::stats_reply& s, const char* name) {
  for (const auto& [k, v] : s.entries) {
    if (k == name) return v;
  }
  return -1;
}

CLI::App* add_curve_keygen_command(CLI::App& app, std::string* prefix) {
  CLI::App* kg = app.add_subcommand("curve-keygen",
                                    "Write a CURVE key pair: PREFIX.key (secret, mode 600) and PREFIX.pub");
  kg->add_option("-o,--out", *prefix, "Path prefix of the two files (neither may exist)")->required();
  return kg;
}

int run_curve_keygen(const std::string& prefix) {
  if (status st = transport::curve_keypair_write(prefix); !st.ok()) return fail(st);
  auto pub = transport::curve_key_file_read(prefix + ".pub", /*secret=*/false);
  if (!pub.ok()) return fail(pub.get_status());
  std::printf("%s\n", pub->c_str());
  std::fflush(stdout);  // the key first, then where it went
  std::fprintf(stderr, "hart: wrote %s.key (secret, mode 600) and %s.pub\n", prefix.c_str(), prefix.c_str());
  return 0;
}

status_or<tokenizer> load_tokenizer(const std::string& model_dir) {
  return tokenizer::load(model_dir + "/tokenizer.json");
}

}  // namespace hart::cli
