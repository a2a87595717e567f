// File: kernels/testing/op_checks.h — the reference-diff harness behind
// `hart check-ops`: every kernel entry point the GPU engine calls runs on fresh
// random inputs on both backends, in each path the engine can take (row counts,
// shapes), and each comparison becomes one line (op, shape, max abs / rel
// error, tolerance, PASS/FAIL). Each check names the entry points its cases
// call (`covers`); op_checks_coverage_test reads the engine's sources
// (runtime/gpu) and fails unless the kernels/ entry points they call are
// exactly the ones covered, so the list cannot drift from the engine. Adding
// an op is one check function in checks/<op>_check.cpp plus one row in
// op_checks.cpp.
//
//   for (const op_check& c : op_checks()) {
//     std::vector<op_check_line> lines;
//     status st = c.run(seed, lines);
//   }
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hart {

/// One CPU-vs-CUDA comparison.
struct op_check_line {
  std::string op;      // "linear_fp8"
  std::string shape;   // "n_rows=4 in=4096 out=1024"
  double max_abs = 0;  // max |cuda - cpu| (index checks: mismatching indices)
  double max_rel =
      0;            // max |cuda - cpu| / scale, scale the per-element magnitude the tolerance is relative to
  std::string tol;  // the bound, as text ("2e-05 * sum|x*w|", "exact")
  bool pass = false;  // every element within its bound, NaN/Inf matching
};

/// Runs one op's cases with inputs drawn from `seed`, appending one line per
/// case. A non-ok status is a failure to run (CUDA error, op refused the case).
using op_check_fn = status (*)(uint32_t seed, std::vector<op_check_line>& lines);

struct op_check {
  const char* op;
  op_check_fn run;                  // null without HART_CUDA
  std::vector<const char*> covers;  // the kernels/ entry points its cases call
};

/// Every registered check, in a fixed order (the same table without
/// HART_CUDA, with null `run`s: the coverage test reads it on any machine).
const std::vector<op_check>& op_checks();

/// ok when a CUDA device can run the checks; unavailable (with the reason)
/// when there is none or hart was built without CUDA.
status op_checks_device_status();

/// "op  shape  max_abs  max_rel  tol  PASS" as one fixed-width line.
std::string op_check_format(const op_check_line& l);

}  // namespace hart
