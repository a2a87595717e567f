// File: cli/cmd_check_ops.h — `hart check-ops`: every op with a CUDA
// implementation against its CPU reference on fresh random inputs, one line
// per comparison (the registry is kernels/testing/op_checks.h).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace hart::cli {

struct check_ops_options {
  std::string device = "cuda";  // the backend compared with the CPU reference
  int64_t seed = -1;            // < 0: a fresh random seed (printed, so the run can be replayed)
  std::string op;               // run only this op's checks ("" = all)
};

/// Adds `hart check-ops` and its options (into `*o`) to `app`.
CLI::App* add_check_ops_command(CLI::App& app, check_ops_options* o);

/// 0 when every check passes; 1 on a failed check, a check that could not
/// run, or no CUDA device.
int run_check_ops(const check_ops_options& o);

}  // namespace hart::cli
