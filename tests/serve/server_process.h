// File: tests/serve/server_process.h
// `hart serve` as a child process for tests: started on an OS-chosen
// loopback port, stdout read for the endpoint (and "worker pid N",
// "weight sync on EP" and "http on HOST:PORT" lines),
// stopped with SIGTERM. The pipe stays open until the server is gone, so the
// server never writes to a closed pipe.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace hart::testing {

class server_process {
 public:
  /// Runs `hart --log warn serve -m MODEL --bind tcp://127.0.0.1:* --deterministic EXTRA...`
  /// (without --deterministic when `deterministic` is false: the GPU engine refuses it).
  server_process(const std::string& model, const std::vector<std::string>& extra, bool deterministic = true) {
    std::vector<std::string> args = {HART_BINARY, "--log", "warn",   "serve",
                                     "-m",        model,   "--bind", "tcp://127.0.0.1:*"};
    if (deterministic) args.push_back("--deterministic");
    args.insert(args.end(), extra.begin(), extra.end());
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(HART_BINARY, argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
    while (endpoint_.empty()) {
      const std::string s = line();
      if (s.empty()) break;
      const size_t at = s.find(" on ");
      if (s.rfind("hart: serving", 0) == 0 && at != std::string::npos) {
        endpoint_ = s.substr(at + 4, s.find_last_not_of("\r\n") - at - 3);
      }
    }
  }
  ~server_process() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
    if (out_) std::fclose(out_);
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// The next stdout line ("" at end of output); "worker pid N" lines update worker_pid().
  std::string line() {
    char buf[512] = {};
    if (!std::fgets(buf, sizeof buf, out_)) return "";
    const std::string s(buf);
    if (s.rfind("hart: worker pid ", 0) == 0) worker_pid_ = std::stoll(s.substr(17));
    if (s.rfind("hart: weight sync on ", 0) == 0)
      weight_sync_endpoint_ = s.substr(21, s.find_last_not_of("\r\n") - 20);
    if (s.rfind("hart: http on ", 0) == 0) http_endpoint_ = s.substr(14, s.find_last_not_of("\r\n") - 13);
    return s;
  }
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }
  int64_t worker_pid() const { return worker_pid_; }
  const std::string& weight_sync_endpoint() const { return weight_sync_endpoint_; }
  /// host:port of --http-bind ("" without it).
  const std::string& http_endpoint() const { return http_endpoint_; }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string endpoint_;
  int64_t worker_pid_ = 0;
  std::string weight_sync_endpoint_;
  std::string http_endpoint_;
};

}  // namespace hart::testing
