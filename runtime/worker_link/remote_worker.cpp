#include "runtime/worker_link/remote_worker.h"

#include "runtime/core/log.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace hart::worker_link {
namespace {

status unavailable(std::string m) {
  return status(status_code::unavailable, std::move(m));
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr const char* k_token_env = "HART_WORKER_TOKEN";

// 32 random bytes as hex, from the kernel's CSPRNG.
status_or<std::string> random_token() {
  unsigned char b[32];
  FILE* f = std::fopen("/dev/urandom", "rb");
  const bool ok = f && std::fread(b, 1, sizeof b, f) == sizeof b;
  if (f) std::fclose(f);
  if (!ok) return status(status_code::internal, "worker token: cannot read /dev/urandom");
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (unsigned char c : b) {
    t += hex[c >> 4];
    t += hex[c & 15];
  }
  return t;
}

std::string describe_exit(int wstatus) {
  if (WIFSIGNALED(wstatus)) return "killed by signal " + std::to_string(WTERMSIG(wstatus));
  if (WIFEXITED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  return "ended";
}

}  // namespace

struct remote_worker::impl {
  remote_worker_params params;
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::string endpoint;
  pid_t child = 0;   // spawned and not yet reaped
  std::string peer;  // routing id of the configured worker; empty: none
  int64_t peer_pid = 0;
  int64_t n_spawned = 0;
  std::string token;  // what a hello must carry: params.token, or the spawned child's

  status send_to(const std::string& id, const worker_message& m) {
    HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, encode(m));
    try {
      auto r = sock.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!r) return unavailable("worker queue full");
      (void)sock.send(zmq::buffer(frame), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {  // EHOSTUNREACH: the worker's connection is gone
      return unavailable(std::string("cannot reach the worker: ") + e.what());
    }
    return {};
  }

  // Compared in constant time: a local process must not learn the token byte by byte.
  bool token_matches(const std::string& t) const {
    if (token.empty()) return true;
    if (t.size() != token.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < t.size(); ++i) diff |= static_cast<unsigned char>(t[i] ^ token[i]);
    return diff == 0;
  }

  /// Reaps the child if it has exited; returns a description then, else "".
  std::string child_exit() {
    if (child <= 0) return "";
    int ws = 0;
    pid_t r = waitpid(child, &ws, WNOHANG);
    if (r == 0) return "";
    std::string d =
        "worker process " + std::to_string(child) + " " + (r == child ? describe_exit(ws) : "is gone");
    child = 0;
    return d;
  }

  /// Drops the current worker: kills and reaps a spawned child.
  void drop() {
    if (!peer.empty()) (void)send_to(peer, worker_bye{});
    peer.clear();
    peer_pid = 0;
    if (child > 0) {
      kill(child, SIGKILL);
      int ws = 0;
      waitpid(child, &ws, 0);
      child = 0;
    }
  }

  status spawn() {
    std::vector<std::string> args = params.spawn_argv;
    args.push_back("--connect");
    args.push_back(endpoint);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    HART_ASSIGN_OR_RETURN(token, random_token());
    // The environment, not argv: other users' `ps` shows argv.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, k_token_env, std::strlen(k_token_env)) != 0 ||
          (*e)[std::strlen(k_token_env)] != '=')
        env.emplace_back(*e);
    }
    env.push_back(std::string(k_token_env) + "=" + token);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return unavailable(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      // Only async-signal-safe calls until exec: the parent has many threads.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);  // `hart serve` blocks SIGINT/SIGTERM in every thread
      prctl(PR_SET_PDEATHSIG, SIGKILL);          // the worker never outlives the server
      if (getppid() != parent) _exit(1);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    child = pid;
    ++n_spawned;
    HART_LOG_INFO("spawned worker process %d", int(pid));
    if (params.on_spawn) params.on_spawn(pid);
    return {};
  }

  /// Receives one message (waiting up to `wait_ms`); false on timeout.
  bool recv(std::string* id, status_or<worker_message>* msg, int64_t wait_ms) {
    zmq::pollitem_t items[] = {{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(wait_ms));
    if (!(items[0].revents & ZMQ_POLLIN)) return false;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(sock, std::back_inserter(frames), zmq::recv_flags::dontwait)) return false;
    if (frames.size() != 2) {
      *msg = invalid_argument("worker message: %zu frames, expected 2", frames.size());
      return true;
    }
    *id = frames[0].to_string();
    *msg = decode(frames[1].data(), frames[1].size());
    return true;
  }

  /// Handles a hello: configures a matching worker and makes it the peer.
  void on_hello(const std::string& id, const worker_hello& h) {
    if (!token_matches(h.token)) {
      HART_LOG_ERROR(
          "refusing worker pid %lld: its hello does not carry the token this server gave its worker",
          (long long)h.pid);
      (void)send_to(id, worker_bye{});
      return;
    }
    if (h.version != link_version || h.model != params.expect) {
      HART_LOG_ERROR("refusing worker pid %lld: version %u (want %u), model {%s} (want {%s})",
                     (long long)h.pid, h.version, link_version, h.model.to_string().c_str(),
                     params.expect.to_string().c_str());
      (void)send_to(id, worker_bye{});
      return;
    }
    if (!peer.empty() && id != peer) {
      HART_LOG_WARN("ignoring worker pid %lld: pid %lld is serving", (long long)h.pid, (long long)peer_pid);
      (void)send_to(id, worker_bye{});
      return;
    }
    if (id == peer) return;  // a heartbeat
    worker_configure config = params.config;
    config.heartbeat_ms =
        params.heartbeat_timeout_ms > 0 ? std::max<int64_t>(1, params.heartbeat_timeout_ms / 4) : 0;
    if (!send_to(id, config).ok()) return;
    peer = id;
    peer_pid = h.pid;
    HART_LOG_INFO("worker pid %lld connected: %s", (long long)h.pid, h.model.to_string().c_str());
  }

  status ensure_worker() {
    if (!peer.empty()) return {};
    if (child > 0 && !child_exit().empty()) child = 0;
    if (!params.spawn_argv.empty() && child <= 0) {
      if (params.max_restarts >= 0 && n_spawned > params.max_restarts) {
        return unavailable("worker process lost and not replaced: " + std::to_string(n_spawned - 1) +
                           " restarts allowed, all used");
      }
      HART_RETURN_IF_ERROR(spawn());
    }
    const int64_t deadline = now_ms() + params.hello_timeout_ms;
    while (peer.empty()) {
      if (std::string d = child_exit(); !d.empty()) return unavailable(d + " before saying hello");
      if (now_ms() >= deadline) {
        drop();
        return unavailable("no worker said hello within " + std::to_string(params.hello_timeout_ms) + " ms");
      }
      std::string id;
      status_or<worker_message> m = invalid_argument("none");
      if (!recv(&id, &m, params.poll_ms)) continue;
      if (!m.ok()) {
        HART_LOG_WARN("worker link: %s", m.get_status().to_string().c_str());
        continue;
      }
      if (auto* h = std::get_if<worker_hello>(&m.value())) on_hello(id, *h);
    }
    return {};
  }

  status_or<sched::step_result> execute(const sched::step_plan& plan) {
    HART_RETURN_IF_ERROR(ensure_worker());
    if (status s = send_to(peer, plan); !s.ok()) {
      drop();
      return s;
    }
    const int64_t deadline = now_ms() + params.step_timeout_ms;
    int64_t last_heard = now_ms();
    for (;;) {
      std::string id;
      status_or<worker_message> m = invalid_argument("none");
      if (recv(&id, &m, params.poll_ms)) {
        if (id == peer) last_heard = now_ms();
        if (!m.ok()) {  // a worker that sends garbage is not trusted with the next step
          if (id == peer) {
            drop();
            return unavailable("worker sent a bad message: " + m.get_status().to_string());
          }
          continue;
        }
        worker_message& v = m.value();
        if (auto* h = std::get_if<worker_hello>(&v)) {
          on_hello(id, *h);
        } else if (id != peer) {
          continue;  // a stale worker's leftovers
        } else if (std::holds_alternative<worker_bye>(v)) {
          const int64_t pid = peer_pid;
          peer.clear();
          drop();
          return unavailable("worker pid " + std::to_string(pid) + " said bye during step " +
                             std::to_string(plan.step));
        } else if (std::holds_alternative<worker_heartbeat>(v)) {
          continue;  // the worker is computing
        } else if (auto* r = std::get_if<sched::step_result>(&v)) {
          if (r->step != plan.step) continue;
          if (r->error.ok() && !sched::sampled_match_plan(plan, *r)) {  // the scheduler CHECKs the shape
            drop();
            return unavailable("worker result does not match step " + std::to_string(plan.step));
          }
          return std::move(*r);
        }
        continue;
      }
      if (std::string d = child_exit(); !d.empty()) {
        peer.clear();
        peer_pid = 0;
        return unavailable(d + " during step " + std::to_string(plan.step));
      }
      if (params.heartbeat_timeout_ms > 0 && now_ms() - last_heard > params.heartbeat_timeout_ms) {
        const int64_t pid = peer_pid;
        drop();
        return unavailable("worker pid " + std::to_string(pid) + " stopped answering: no heartbeat for " +
                           std::to_string(params.heartbeat_timeout_ms) + " ms during step " +
                           std::to_string(plan.step));
      }
      if (now_ms() >= deadline) {
        const int64_t pid = peer_pid;
        drop();
        return unavailable("worker pid " + std::to_string(pid) + " did not answer step " +
                           std::to_string(plan.step) + " within " + std::to_string(params.step_timeout_ms) +
                           " ms");
      }
    }
  }

  bool check_idle(std::string* why) {
    std::string lost;
    for (int i = 0; i < 64 && lost.empty(); ++i) {  // what arrived since the last step
      std::string id;
      status_or<worker_message> m = invalid_argument("none");
      if (!recv(&id, &m, 0)) break;
      if (!m.ok()) {
        if (id == peer) {
          lost = "worker pid " + std::to_string(peer_pid) + " sent a bad message while idle";
          drop();
        }
        continue;
      }
      if (auto* h = std::get_if<worker_hello>(&m.value())) {
        on_hello(id, *h);
      } else if (id == peer && std::holds_alternative<worker_bye>(m.value())) {
        lost = "worker pid " + std::to_string(peer_pid) + " said bye while idle";
        peer.clear();
        drop();
      }
    }
    if (lost.empty()) {
      std::string d = child_exit();
      if (d.empty()) return false;
      lost = d + " while idle";
      if (peer.empty()) {  // it died before its hello, or a step already reported it
        return false;
      }
      peer.clear();
      peer_pid = 0;
    }
    HART_LOG_WARN("%s: its KV pages are lost", lost.c_str());
    // Workers started elsewhere connect when they do: a later check or execute() takes their hello.
    if (params.spawn_argv.empty()) {
      if (why) *why = std::move(lost);
      return true;
    }
    if (status s = ensure_worker(); !s.ok()) {
      HART_LOG_ERROR("no worker after an idle loss: %s", s.to_string().c_str());
      lost += "; " + s.message();
    }
    if (why) *why = std::move(lost);
    return true;
  }
};

remote_worker::remote_worker(std::unique_ptr<impl> p) : p_(std::move(p)) {}

remote_worker::~remote_worker() {
  if (!p_) return;
  if (!p_->peer.empty()) (void)p_->send_to(p_->peer, worker_bye{});
  p_->peer.clear();
  for (int i = 0; i < 40 && p_->child > 0; ++i) {
    if (!p_->child_exit().empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  p_->drop();
}

status_or<std::unique_ptr<remote_worker>> remote_worker::start(remote_worker_params params) {
  if (params.config.page_size <= 0) return invalid_argument("remote_worker: page_size must be set");
  auto p = std::make_unique<impl>();
  p->params = std::move(params);
  p->token = p->params.token;  // replaced by a fresh one at each spawn
  try {
    p->sock.set(zmq::sockopt::router_mandatory, 1);
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_bytes + 64));
    p->sock.bind(p->params.endpoint);
    p->endpoint = p->sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("worker link: cannot bind " + p->params.endpoint + ": " + e.what());
  }
  std::unique_ptr<remote_worker> rw(new remote_worker(std::move(p)));
  if (!rw->p_->params.spawn_argv.empty()) HART_RETURN_IF_ERROR(rw->ensure_worker());
  return rw;
}

status_or<sched::step_result> remote_worker::execute(const sched::step_plan& plan) {
  return p_->execute(plan);
}
status remote_worker::ensure_worker() {
  return p_->ensure_worker();
}
const std::string& remote_worker::endpoint() const {
  return p_->endpoint;
}
int64_t remote_worker::worker_pid() const {
  return p_->peer_pid;
}
int64_t remote_worker::n_spawned() const {
  return p_->n_spawned;
}
int64_t remote_worker::idle_check_ms() const {
  return p_->params.idle_check_ms;
}
bool remote_worker::check_idle(std::string* why) {
  return p_->check_idle(why);
}

}  // namespace hart::worker_link
