// `hart serve` failing at startup after the model has loaded (the socket
// binds come after the actors start): each case exits 1 promptly with the
// error, and never prints that it is serving. Before the teardown in
// cmd_serve.cpp each of these hung forever (the actor system waited for the
// actors already started, with SIGINT and SIGTERM blocked), and a failed
// weight-sync bind kept the main port serving.
#include "tests/command_run.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace hart::testing {
namespace {

std::string tiny_a() {
  return std::string(HART_TEST_DATA) + "/tiny-a";
}

struct run_result {
  command_result r;
  double seconds;
};

// 124 or 137 from timeout: still running after 30 s (SIGTERM, then SIGKILL).
run_result run_serve(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  command_result r = command_run("OMP_WAIT_POLICY=PASSIVE timeout -k 5 30 " + std::string(HART_BINARY) +
                                 " --log warn serve -m " + tiny_a() + " " + args);
  return {std::move(r), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

void expect_startup_failure(const std::string& args, const std::string& message) {
  SCOPED_TRACE("hart serve " + args);
  const auto [r, seconds] = run_serve(args);
  EXPECT_TRUE(r.exit_code != 124 && r.exit_code != 137) << "still running after 30 s\n" << r.out;
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("hart: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hart: serving"), std::string::npos) << r.out;
  std::printf("hart serve %s: exit %d after %.2f s\n", args.c_str(), r.exit_code, seconds);
}

TEST(serve_startup, bind_failures_after_the_model_loads_exit_1_promptly) {
  server_process first(tiny_a(), {});
  ASSERT_FALSE(first.endpoint().empty());
  expect_startup_failure("--bind " + first.endpoint(), first.endpoint());
  expect_startup_failure("--bind tcp://0.0.0.0:*", "0.0.0.0");
  // The main port binds, then the weight-sync port is taken: both must go.
  expect_startup_failure("--bind tcp://127.0.0.1:* --weight-sync-endpoint " + first.endpoint(),
                         first.endpoint());
}

}  // namespace
}  // namespace hart::testing
