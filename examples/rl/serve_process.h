// File: examples/rl/serve_process.h
// A `hart serve` child process for the RL example: started on OS-chosen
// loopback ports with weight sync on, its stdout read for the two endpoints,
// stopped with SIGTERM when this object goes away.
//
//   auto srv = serve_process::start("build/hart", "out/model", {"--precision", "fp8"});
//   rollout_client::connect({srv.value()->endpoint()});
#pragma once

#include "runtime/core/status.h"

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace hart::rl {

class serve_process {
 public:
  /// Runs `HART --log warn serve -m MODEL --bind tcp://127.0.0.1:* --weight-sync-endpoint
  /// tcp://127.0.0.1:* EXTRA...` and waits for it to serve. unavailable when it exits first.
  static status_or<std::unique_ptr<serve_process>> start(const std::string& hart, const std::string& model,
                                                         const std::vector<std::string>& extra);
  ~serve_process();
  serve_process(const serve_process&) = delete;
  serve_process& operator=(const serve_process&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& weight_sync_endpoint() const { return weight_sync_endpoint_; }

 private:
  serve_process() = default;
  pid_t pid_ = -1;
  FILE* out_ = nullptr;  ///< kept open until the child is gone, so it never writes to a closed pipe
  std::string endpoint_;
  std::string weight_sync_endpoint_;
};

}  // namespace hart::rl
