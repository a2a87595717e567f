// File: tests/command_run.h — a shell command run as a user would run it
// (the hart binary from a test): its exit code and what it printed, stdout
// and stderr together.
//
//   const command_result r = command_run(std::string(HART_BINARY) + " generate -p hi");
//   EXPECT_EQ(r.exit_code, 1) << r.out;
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace hart::testing {

struct command_result {
  int exit_code;    // -1 when it did not exit normally
  std::string out;  // stdout + stderr
};

inline command_result command_run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace hart::testing
