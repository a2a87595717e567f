#include "runtime/transport/curve_auth.h"

#include "runtime/core/log.h"

#include <sys/stat.h>
#include <zmq.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <thread>

namespace hart::transport {
namespace {

constexpr const char* k_zap_endpoint = "inproc://zeromq.zap.01";
constexpr size_t k_max_logged_keys = 64;  // refusals are logged once per key, for this many keys

std::string trimmed(const std::string& line) {
  size_t b = 0, e = line.size();
  while (b < e && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(line[e - 1]))) --e;
  return line.substr(b, e - b);
}

// The key's 32 bytes, or empty when it is not 40 Z85 characters.
std::string z85_bytes(const std::string& z85) {
  if (z85.size() != 40) return {};
  uint8_t out[32];
  if (!zmq_z85_decode(out, z85.c_str())) return {};
  return std::string(reinterpret_cast<const char*>(out), 32);
}

// Every key line of `path` (not blank, not a comment) with its line number.
status_or<std::vector<std::pair<int, std::string>>> key_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("%s: cannot open", path.c_str());
  std::vector<std::pair<int, std::string>> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string t = trimmed(line);
    if (!t.empty() && t[0] != '#') lines.emplace_back(n, std::move(t));
  }
  return lines;
}

}  // namespace

status_or<std::string> curve_key_file_read(const std::string& path, bool secret) {
  if (secret) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return not_found("%s: cannot open", path.c_str());
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
      return invalid_argument(
          "%s: a secret key file must not be accessible by group or others (chmod 600 %s)", path.c_str(),
          path.c_str());
    }
  }
  HART_ASSIGN_OR_RETURN(auto lines, key_lines(path));
  if (lines.empty()) return invalid_argument("%s: no key in the file", path.c_str());
  const auto& [n, key] = lines.front();
  if (z85_bytes(key).empty()) {
    return invalid_argument("%s:%d: not a Z85 CURVE key (40 characters, %zu given)", path.c_str(), n,
                            key.size());
  }
  return key;
}

status_or<std::vector<std::string>> curve_allowlist_read(const std::string& path) {
  HART_ASSIGN_OR_RETURN(auto lines, key_lines(path));
  std::vector<std::string> keys;
  for (const auto& [n, key] : lines) {
    if (z85_bytes(key).empty()) {
      return invalid_argument("%s:%d: not a Z85 CURVE public key (40 characters, %zu given)", path.c_str(), n,
                              key.size());
    }
    keys.push_back(key);
  }
  if (keys.empty()) return invalid_argument("%s: no client keys (nobody could connect)", path.c_str());
  return keys;
}

status_or<std::string> curve_public_of(const std::string& secret_z85) {
  if (z85_bytes(secret_z85).empty()) return invalid_argument("curve_public_of: not a Z85 CURVE key");
  char pub[41];
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0) return internal_error("zmq_curve_public failed");
  return std::string(pub);
}

status curve_client_setup(zmq::socket_t& sock, const std::string& server_z85, const std::string& secret_z85) {
  if (server_z85.empty()) return {};
  if (z85_bytes(server_z85).empty())
    return invalid_argument("the server's CURVE public key is not 40 Z85 characters");
  std::string pub, sec = secret_z85;
  if (sec.empty()) {
    char pub_z85[41], sec_z85[41];
    if (zmq_curve_keypair(pub_z85, sec_z85) != 0)
      return internal_error("zmq_curve_keypair failed (libzmq without CURVE?)");
    pub = pub_z85;
    sec = sec_z85;
  } else {
    HART_ASSIGN_OR_RETURN(pub, curve_public_of(sec));
  }
  try {
    sock.set(zmq::sockopt::curve_serverkey, server_z85);
    sock.set(zmq::sockopt::curve_publickey, pub);
    sock.set(zmq::sockopt::curve_secretkey, sec);
  } catch (const zmq::error_t& e) {
    return invalid_argument("CURVE client keys: %s", e.what());
  }
  return {};
}

status curve_keypair_write(const std::string& prefix) {
  const std::string secret_path = prefix + ".key", public_path = prefix + ".pub";
  for (const std::string& p : {secret_path, public_path}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0)
      return failed_precondition("%s exists; not overwriting a key", p.c_str());
  }
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return internal_error("zmq_curve_keypair failed (libzmq without CURVE?)");
  {
    const mode_t old = ::umask(077);  // the secret is never readable by others, not even briefly
    std::ofstream out(secret_path);
    ::umask(old);
    out << "# hart CURVE secret key: keep private (the server's --curve-secret-key-file, a client's "
           "--curve-client-key-file)\n"
        << sec << "\n";
    if (!out) return internal_error("%s: cannot write", secret_path.c_str());
  }
  std::ofstream out(public_path);
  out << "# hart CURVE public key: give it to peers (a client's --curve-server-key, a server's allowlist "
         "line)\n"
      << pub << "\n";
  if (!out) return internal_error("%s: cannot write", public_path.c_str());
  return {};
}

struct zap_authenticator::impl {
  zmq::socket_t sock;
  std::optional<zmq::socket_t> monitor;  // the guarded socket's connection events
  std::function<void(int)> on_disconnected;
  std::set<std::string> allowed;  // 32-byte public keys; empty: any
  int64_t max_connections = 0;
  std::set<std::string> logged;  // refused keys already logged
  bool at_limit_logged = false;  // the limit's refusal logged since connections last fell below it
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> accepted{0}, refused{0}, refused_limit{0};
  std::atomic<int64_t> open{0};
  std::thread thread;

  explicit impl(zmq::context_t& ctx) : sock(ctx, zmq::socket_type::rep) {}

  // One monitor event: [u16 event, u32 value][endpoint].
  void on_monitor_event() {
    std::vector<zmq::message_t> ev;
    (void)zmq::recv_multipart(*monitor, std::back_inserter(ev), zmq::recv_flags::dontwait);
    if (ev.empty() || ev[0].size() < 6) return;
    uint16_t event;
    uint32_t fd;
    std::memcpy(&event, ev[0].data(), 2);
    std::memcpy(&fd, static_cast<const char*>(ev[0].data()) + 2, 4);
    if (event == ZMQ_EVENT_ACCEPTED) ++open;
    if (event == ZMQ_EVENT_DISCONNECTED) {
      if (open > 0) --open;
      if (on_disconnected) on_disconnected(int(fd));
    }
    if (open < max_connections) at_limit_logged = false;
  }

  // One ZAP request (RFC 27): version, request id, domain, address, identity, mechanism, credentials.
  void authenticate(std::vector<zmq::message_t>& req) {
    const auto str = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
    const std::string version = str(0), request_id = str(1), address = str(3), mechanism = str(5);
    std::string user, why;
    if (version != "1.0") {
      why = "bad ZAP version";
    } else if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
      const std::string key = req[6].to_string();
      char z85[41];
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32);
      user = z85;
      if (!allowed.empty() && !allowed.count(key)) why = "key not allowed";
    } else if (mechanism != "NULL" || !allowed.empty()) {
      why = "mechanism " + mechanism + " not allowed";
    }
    // The handshake's own connection is counted already (ACCEPTED comes before its ZAP request).
    if (why.empty() && max_connections > 0 && open > max_connections) why = "connection limit";
    const bool ok = why.empty();
    if (ok) {
      ++accepted;
    } else if (why == "connection limit") {
      ++refused_limit;
      if (!at_limit_logged) {
        HART_LOG_WARN("refusing new connections (from %s first): %lld open, the limit (--max-connections)",
                      address.c_str(), (long long)max_connections);
        at_limit_logged = true;
      }
    } else {
      ++refused;
      if (logged.size() < k_max_logged_keys && logged.insert(user).second) {
        HART_LOG_WARN("refused a %s client from %s: %s%s%s", mechanism.c_str(), address.c_str(), why.c_str(),
                      user.empty() ? "" : ", key ", user.c_str());
      }
    }
    const std::string frames[] = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : why, ok ? user : "", ""};
    for (size_t i = 0; i < 6; ++i) {
      sock.send(zmq::buffer(frames[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  void run() {
    while (!stop.load(std::memory_order_acquire)) {
      zmq::pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0},
                                  {monitor ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      try {
        if (zmq::poll(items, monitor ? 2 : 1, std::chrono::milliseconds(100)) == 0) continue;
        // Connection events first: a handshake's ACCEPTED is queued before its ZAP request.
        while (monitor && (items[1].revents & ZMQ_POLLIN)) {
          on_monitor_event();
          zmq::pollitem_t again{monitor->handle(), 0, ZMQ_POLLIN, 0};
          items[1].revents = zmq::poll(&again, 1, std::chrono::milliseconds(0)) > 0 ? ZMQ_POLLIN : 0;
        }
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        std::vector<zmq::message_t> req;
        (void)zmq::recv_multipart(sock, std::back_inserter(req), zmq::recv_flags::dontwait);
        if (!req.empty()) authenticate(req);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        HART_LOG_ERROR("zap: %s", e.what());
      }
    }
  }
};

zap_authenticator::zap_authenticator(std::unique_ptr<impl> p) : p_(std::move(p)) {}

zap_authenticator::~zap_authenticator() {
  p_->stop.store(true, std::memory_order_release);
  if (p_->thread.joinable()) p_->thread.join();
}

uint64_t zap_authenticator::accepted() const {
  return p_->accepted.load(std::memory_order_relaxed);
}
uint64_t zap_authenticator::refused() const {
  return p_->refused.load(std::memory_order_relaxed);
}
uint64_t zap_authenticator::refused_connections() const {
  return p_->refused_limit.load(std::memory_order_relaxed);
}
int64_t zap_authenticator::connections() const {
  return p_->open.load(std::memory_order_relaxed);
}

status_or<std::unique_ptr<zap_authenticator>> zap_authenticator::start(zmq::context_t& ctx, zap_rules rules) {
  auto p = std::make_unique<impl>(ctx);
  for (const std::string& k : rules.allowed_clients) {
    std::string b = z85_bytes(k);
    if (b.empty()) return invalid_argument("zap: '%s' is not a Z85 CURVE public key", k.c_str());
    p->allowed.insert(std::move(b));
  }
  p->max_connections = rules.max_connections;
  p->on_disconnected = std::move(rules.on_disconnected);
  try {
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.bind(k_zap_endpoint);
    if (rules.max_connections > 0 || p->on_disconnected) {
      if (rules.monitor_endpoint.empty()) {
        return invalid_argument("zap: max_connections and on_disconnected need the socket's monitor");
      }
      p->monitor.emplace(ctx, zmq::socket_type::pair);
      p->monitor->set(zmq::sockopt::linger, 0);
      p->monitor->connect(rules.monitor_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return unavailable("zap: binding %s: %s", k_zap_endpoint, e.what());
  }
  impl* raw = p.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<zap_authenticator>(new zap_authenticator(std::move(p)));
}

}  // namespace hart::transport
