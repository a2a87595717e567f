// `hart check-ops`: the one command that localises a numerical bug to an op.
// Op-specific code lives in kernels/testing (op_checks.h); this file only
// picks the seed, runs the registry and prints its lines.
#include "cli/cmd_check_ops.h"

#include "cli/cli_common.h"
#include "kernels/testing/op_checks.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace hart::cli {

CLI::App* add_check_ops_command(CLI::App& app, check_ops_options* o) {
  CLI::App* cmd = app.add_subcommand(
      "check-ops",
      "Run every op that has a CUDA implementation on fresh random inputs on the CPU reference and on "
      "the device; one line per op: shape, max abs/rel error, tolerance, PASS/FAIL");
  cmd->add_option("--device", o->device, "Backend compared with the CPU reference (needs a CUDA device)")
      ->check(CLI::IsMember({"cuda"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Input seed (default: fresh; printed so a run can be replayed)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--op", o->op, "Only this op's checks (rms_norm, linear, sparse_attention, ...)");
  return cmd;
}

int run_check_ops(const check_ops_options& o) {
  const status dev = op_checks_device_status();
  if (!dev.ok()) return fail(status(dev.code(), "check-ops --device " + o.device + ": " + dev.message()));
  bool known = o.op.empty();
  for (const op_check& c : op_checks()) known = known || o.op == c.op;
  if (!known) return fail(invalid_argument("check-ops: no check for op '%s'", o.op.c_str()));

  const uint32_t seed = o.seed >= 0 ? uint32_t(o.seed) : std::random_device{}();
  std::printf("check-ops: CUDA vs CPU reference, seed %u (replay: hart check-ops --seed %u)\n", seed, seed);
  int n_fail = 0, n_lines = 0;
  for (const op_check& c : op_checks()) {
    if (!o.op.empty() && o.op != c.op) continue;
    std::vector<op_check_line> lines;
    const status st = c.run(seed, lines);
    for (const op_check_line& l : lines) {
      std::printf("%s\n", op_check_format(l).c_str());
      n_fail += !l.pass;
      ++n_lines;
    }
    if (!st.ok()) {
      std::printf("%-18s %-40s ERROR %s\n", c.op, "", st.to_string().c_str());
      ++n_fail;
    }
    std::fflush(stdout);
  }
  std::printf("check-ops: %d checks, %d failed\n", n_lines, n_fail);
  return n_fail ? 1 : 0;
}

}  // namespace hart::cli
