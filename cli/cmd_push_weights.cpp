// `hart push-weights`: a checkpoint's tensors pushed into a running `hart serve
// --weight-sync-endpoint` as one new weight version (docs/protocol.md §8),
// with the transfer rate and the server's build and swap times.
#include "cli/cli_common.h"
#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"

#include <CLI/CLI.hpp>

#include <cstdio>

namespace hart::cli {

CLI::App* add_push_weights_command(CLI::App& app, push_weights_options* o) {
  CLI::App* cmd = app.add_subcommand(
      "push-weights", "Push a checkpoint's tensors into a running server as a new weight version");
  cmd->add_option("-m,--model", o->model_dir,
                  "Checkpoint directory (*.safetensors; BF16/F16/F32, I32/I64 tables)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--endpoint", o->endpoint, "The server's --weight-sync-endpoint")->required();
  add_curve(cmd, &o->curve);
  cmd->add_option("--version", o->version, "Weight version; above the serving one")->required();
  cmd->add_option("--bucket", o->bucket, "Tensor bytes per bucket (at most 1GiB)")->capture_default_str();
  cmd->add_option("--timeout-ms", o->timeout_ms,
                  "Longest wait for one reply, or for a connection to send on (a server that refuses "
                  "this client's key fails the push after it)")
      ->capture_default_str();
  cmd->add_option(
         "--lanes", o->lanes,
         "Connections the buckets go over, received in parallel (0 = a quarter of the cores, 1 to 4)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  return cmd;
}

int run_push_weights(const push_weights_options& o) {
  auto bucket = parse_size(o.bucket, /*bytes=*/true);
  if (!bucket.ok()) return fail(bucket.get_status());
  auto ckpt = checkpoint_tensors_open(o.model_dir);
  if (!ckpt.ok()) return fail(ckpt.get_status());
  weight_sync_client_params p;
  p.endpoint = o.endpoint;
  if (status st = curve_client_keys(o.curve, &p.curve_server_key, &p.curve_secret_key); !st.ok())
    return fail(st);
  p.bucket_bytes = uint64_t(*bucket);
  p.reply_timeout = std::chrono::milliseconds(o.timeout_ms);
  p.lanes = o.lanes;
  auto client = weight_sync_client::connect(p);
  if (!client.ok()) return fail(client.get_status());
  auto r = (*client)->push(o.version, ckpt->tensors);
  if (!r.ok()) return fail(r.get_status());
  std::printf("hart: weight version %llu serving: %lld tensors, %.3f GB in %lld buckets, crc32c %08x\n",
              (unsigned long long)r->version, (long long)r->n_tensors, double(r->n_bytes) * 1e-9,
              (long long)r->n_buckets, r->crc32c);
  std::printf("hart: transfer %.3f s (%.2f GB/s), build %.3f s, swap %.3f s, total %.3f s\n", r->transfer_s,
              r->gb_per_s, r->build_s, r->swap_s, r->total_s);
  return 0;
}

}  // namespace hart::cli
