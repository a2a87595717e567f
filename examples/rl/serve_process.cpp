#include "examples/rl/serve_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace hart::rl {

namespace {

// "hart: serving DIR on EP\n" -> EP; "hart: weight sync on EP\n" -> EP.
std::string endpoint_after_on(const std::string& line) {
  const size_t at = line.rfind(" on ");
  if (at == std::string::npos) return "";
  std::string ep = line.substr(at + 4);
  while (!ep.empty() && (ep.back() == '\n' || ep.back() == '\r')) ep.pop_back();
  return ep;
}

}  // namespace

status_or<std::unique_ptr<serve_process>> serve_process::start(const std::string& hart,
                                                               const std::string& model,
                                                               const std::vector<std::string>& extra) {
  if (access(hart.c_str(), X_OK) != 0)
    return not_found("serve_process: %s is not an executable", hart.c_str());
  std::vector<std::string> args = {hart,
                                   "--log",
                                   "warn",
                                   "serve",
                                   "-m",
                                   model,
                                   "--bind",
                                   "tcp://127.0.0.1:*",
                                   "--weight-sync-endpoint",
                                   "tcp://127.0.0.1:*"};
  args.insert(args.end(), extra.begin(), extra.end());
  int out[2];
  if (pipe(out) != 0) return internal_error("serve_process: pipe failed");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Trainer and server take turns on the same cores: spinning OpenMP workers
  // of an idle server would slow the trainer badly (set here, not in the
  // child, which may only make async-signal-safe calls).
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  std::unique_ptr<serve_process> p(new serve_process());
  p->pid_ = fork();
  if (p->pid_ < 0) return internal_error("serve_process: fork failed");
  if (p->pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execv(hart.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  p->out_ = fdopen(out[0], "r");
  char buf[1024];
  while (p->endpoint_.empty() && std::fgets(buf, sizeof buf, p->out_)) {
    const std::string line(buf);
    if (line.rfind("hart: weight sync on ", 0) == 0) p->weight_sync_endpoint_ = endpoint_after_on(line);
    if (line.rfind("hart: serving ", 0) == 0) p->endpoint_ = endpoint_after_on(line);
  }
  if (p->endpoint_.empty() || p->weight_sync_endpoint_.empty()) {
    return status(status_code::unavailable, "serve_process: `" + hart + " serve -m " + model +
                                                "` exited before serving (its errors are on stderr above)");
  }
  return p;
}

serve_process::~serve_process() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  if (out_) std::fclose(out_);
}

}  // namespace hart::rl
