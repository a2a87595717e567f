// `hart random-checkpoint`: a checkpoint of random weights at any config's
// shapes, in the official release format (FP8 + MXFP4, sharded) or as BF16,
// for exercising loaders and engines at real shapes without the real weights.
#include "cli/cli_common.h"
#include "runtime/model/random_checkpoint.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

namespace hart::cli {

CLI::App* add_random_checkpoint_command(CLI::App& app, random_checkpoint_cli_options* o) {
  CLI::App* cmd = app.add_subcommand(
      "random-checkpoint",
      "Write a checkpoint of random weights at a config's shapes (loaders and engines at real shapes)");
  cmd->add_option("--config", o->config,
                  "config.json to take the shapes from (e.g. configs/deepseek-v4-flash/config.json)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", o->out, "Directory to write (created)")->required();
  cmd->add_option(
         "--format", o->format,
         "release: as DeepSeek publishes (FP8 e4m3 + 128x128 E8M0 scales, MXFP4 routed experts, BF16 "
         "rest, sharded with an index); bf16: BF16 linears, one file")
      ->check(CLI::IsMember({"release", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed,
                  "Seed of the weights (same seed, config and format: same bytes on any machine)")
      ->capture_default_str();
  cmd->add_option("--num-layers", o->num_layers, "Keep only the first N layers of the config (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shard-size", o->shard_size, "release: start a new shard after this many bytes")
      ->capture_default_str();
  cmd->add_flag("--bf16-values", o->bf16_values,
                "Round every weight to bf16 as drawn, so the bf16 and release checkpoints of one seed hold "
                "the same weights, as a trainer's checkpoint and its release conversion do (for weight-push "
                "tests: pushing the bf16 one into a server must give what loading the release one gives)");
  return cmd;
}

int run_random_checkpoint(const random_checkpoint_cli_options& o) {
  std::ifstream in(o.config);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return fail(invalid_argument("--config %s: not a JSON object", o.config.c_str()));
  }
  if (o.num_layers > 0) {
    if (status s = random_checkpoint_truncate_layers(config, o.num_layers); !s.ok()) return fail(s);
  }
  random_checkpoint_options opt;
  opt.seed = o.seed;
  opt.bf16_values = o.bf16_values;
  if (!checkpoint_format_parse(o.format, &opt.format)) {
    return fail(invalid_argument("--format '%s': expected bf16 or release", o.format.c_str()));
  }
  auto shard = parse_size(o.shard_size, true);
  if (!shard.ok()) return fail(shard.get_status());
  opt.shard_bytes = *shard;
  if (status s = random_checkpoint_write(o.out, config, opt); !s.ok()) return fail(s);
  std::fprintf(stderr, "hart: wrote a %s checkpoint of %lld layers to %s\n", o.format.c_str(),
               (long long)config.value("num_hidden_layers", int64_t(0)), o.out.c_str());
  return 0;
}

}  // namespace hart::cli
