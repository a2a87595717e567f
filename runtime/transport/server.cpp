#include "runtime/transport/server.h"

#include "runtime/core/log.h"
#include "runtime/core/malloc_tuning.h"
#include "runtime/protocol/codec.h"
#include "runtime/transport/curve_auth.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hart::transport {

namespace {

using clock_type = std::chrono::steady_clock;

struct outgoing {
  client_id client;
  std::array<uint8_t, 2> header;
  std::vector<uint8_t> payload;
  bool chunk = false;  ///< a chunk_event: dropped for a slow reader (the rest is kept)
};

/// A peer whose pipe is at its HWM: its replies wait here, in order, so other peers' go on.
struct blocked_peer {
  std::deque<outgoing> queue;
  clock_type::time_point since;
  bool slow = false;  ///< declared a slow reader: chunks for it are dropped until the queue drains
};

enum class send_result { sent, would_block, unroutable };

status unavailable(std::string msg) {
  return status(status_code::unavailable, std::move(msg));
}

}  // namespace

bool endpoint_is_local(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string rest = endpoint.substr(6);
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = rest.substr(0, colon);
  if (host == "localhost" || host == "[::1]") return true;
  if (host.rfind("127.", 0) != 0) return false;
  for (char c : host.substr(4))  // a dotted IPv4 address, not an interface or host name
    if (!(c == '.' || (c >= '0' && c <= '9'))) return false;
  return true;
}

status server_params::validate() const {
  if (endpoint.empty()) return invalid_argument("server_params.endpoint: empty");
  if (outbox_capacity < 1) return invalid_argument("server_params.outbox_capacity: must be >= 1");
  if (!curve_secret_key.empty() && curve_secret_key.size() != 40)
    return invalid_argument("server_params.curve_secret_key: %zu chars, expected 40 (Z85)",
                            curve_secret_key.size());
  if (max_connections < 0) return invalid_argument("server_params.max_connections: must be >= 0");
  if (send_hwm < 0 || recv_hwm < 0 || stall_timeout_ms < 0)
    return invalid_argument("server_params: hwm and stall_timeout_ms must be >= 0");
  if (!curve_allowed_clients.empty() && curve_secret_key.empty())
    return invalid_argument("server_params.curve_allowed_clients: an allowlist needs curve_secret_key");
  if (curve_secret_key.empty() && !endpoint_is_local(endpoint))
    return failed_precondition(
        "server_params.endpoint: %s is not loopback; binding it needs a CURVE secret key (hart serve "
        "--curve-secret-key-file)",
        endpoint.c_str());
  return {};
}

// -- impl ------------------------------------------------------------------------------------

struct server::impl {
  server_params params;
  request_handler on_request;
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::unique_ptr<zap_authenticator> zap;  ///< with curve_allowed_clients; goes before ctx
  int wake_fd = -1;                        ///< eventfd: send() and stop() write, the socket thread reads
  std::string endpoint;

  std::mutex mu;                  ///< guards outbox
  std::condition_variable space;  ///< signalled when the socket thread takes the outbox
  std::deque<outgoing> outbox;    ///< filled by send(), emptied by the socket thread
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::atomic<std::thread::id> thread_id{};  ///< the socket thread, set by itself

  slow_client_handler on_slow_client;
  disconnect_handler on_disconnect;

  std::atomic<uint64_t> received{0}, decode_errors{0}, sent{0}, unroutable{0}, stalled{0}, rejected{0},
      slow_clients{0}, disconnects{0};

  std::mutex closed_mu;         ///< guards closed_fds
  std::vector<int> closed_fds;  ///< connections the monitor saw close (zap thread), not yet applied

  // -- socket thread only --
  std::deque<outgoing> pending;  ///< taken from outbox, not yet tried on the socket
  std::map<client_id, blocked_peer> blocked;
  std::unordered_map<int, std::set<client_id>> fd_clients;  ///< open connections' clients
  std::unordered_map<client_id, int> client_fd;
  int64_t closed_since_trim = 0;  ///< connections closed since freed memory was last given back
  clock_type::time_point last_trim = clock_type::now();

  ~impl() {
    zap.reset();  // its thread calls connection_closed, which writes wake_fd
    if (wake_fd >= 0) ::close(wake_fd);
  }

  /// Zap thread: the monitor saw connection `fd` close.
  void connection_closed(int fd) {
    {
      std::lock_guard<std::mutex> lk(closed_mu);
      closed_fds.push_back(fd);
    }
    wake();
  }

  /// Every client of a closed connection is gone: its queued replies dropped, its owner told.
  void apply_closed() {
    std::vector<int> fds;
    {
      std::lock_guard<std::mutex> lk(closed_mu);
      fds.swap(closed_fds);
    }
    closed_since_trim += int64_t(fds.size());
    for (int fd : fds) {
      auto it = fd_clients.find(fd);
      if (it == fd_clients.end()) continue;
      const std::set<client_id> gone = std::move(it->second);
      fd_clients.erase(it);
      for (const client_id& c : gone) {
        client_fd.erase(c);
        blocked.erase(c);
        disconnects.fetch_add(1, std::memory_order_relaxed);
        if (!on_disconnect) continue;
        try {
          on_disconnect(c);
        } catch (const std::exception& e) {  // the handler must not throw; contain it if it does
          HART_LOG_ERROR("on_disconnect threw: %s", e.what());
        }
      }
    }
  }

  /// Closed connections' pipes were allocated by ZeroMQ's I/O threads in arenas of their own,
  /// whose freed pages glibc keeps: give them back, at most every k_trim_interval (a trim
  /// takes milliseconds) and once the closes stop coming as well.
  static constexpr auto k_trim_interval = std::chrono::seconds(2);
  std::chrono::milliseconds until_trim() const {
    if (closed_since_trim == 0) return std::chrono::milliseconds(-1);
    const auto left = last_trim + k_trim_interval - clock_type::now();
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(left));
  }
  void maybe_trim() {
    if (closed_since_trim == 0 || until_trim().count() > 0) return;
    malloc_return_freed_memory();
    closed_since_trim = 0;
    last_trim = clock_type::now();
  }

  /// Remembers which connection `client` speaks on (closes seen so far applied first, so a
  /// descriptor reused by a new connection starts clean).
  void note_connection(const client_id& client, int fd) {
    apply_closed();
    if (fd < 0) return;
    auto [it, fresh] = client_fd.try_emplace(client, fd);
    if (!fresh && it->second == fd) return;
    if (!fresh) fd_clients[it->second].erase(client);  // the same routing id on a new connection
    it->second = fd;
    fd_clients[fd].insert(client);
  }

  void wake() {
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd, &one, sizeof(one));
    (void)n;  // EAGAIN means the counter is already non-zero: the thread will wake anyway
  }

  void answer_error(const client_id& client, const status& s, const protocol::request_ref& ref = {}) {
    decode_errors.fetch_add(1, std::memory_order_relaxed);
    auto enc =
        protocol::encode_reply(protocol::reply{protocol::error_reply_from(s, ref.request_id, ref.tag)});
    if (enc.ok()) pending.push_back({client, enc->header, std::move(enc->payload)});
  }

  void handle_inbound(std::vector<zmq::message_t>& frames) {
    if (frames.empty()) return;
    client_id client(frames[0].data<char>(), frames[0].size());
    // The descriptor of the connection a part came in on (the routing id part is made by
    // the socket, the others came from the wire); -1 where libzmq cannot say.
    note_connection(client, zmq_msg_get(frames.back().handle(), ZMQ_SRCFD));
    if (frames.size() != 3) {
      answer_error(client,
                   invalid_argument("frames: got %zu, expected [header][payload]", frames.size() - 1));
      return;
    }
    protocol::request_ref ref;
    auto req = protocol::decode_request({frames[1].data(), frames[1].size()},
                                        {frames[2].data(), frames[2].size()}, &ref);
    if (!req.ok()) {
      answer_error(client, req.get_status(), ref);
      return;
    }
    received.fetch_add(1, std::memory_order_relaxed);
    try {
      on_request(client, std::move(req).value());
    } catch (const std::exception& e) {  // the handler must not throw; contain it if it does
      HART_LOG_ERROR("on_request threw: %s", e.what());
    }
  }

  void drain_inbound() {
    // NOTE(transport): at most 256 messages per wake, so a flood cannot starve outbound sends.
    for (int i = 0; i < 256; ++i) {
      std::vector<zmq::message_t> frames;
      auto got = zmq::recv_multipart(sock, std::back_inserter(frames), zmq::recv_flags::dontwait);
      if (!got) return;
      handle_inbound(frames);
    }
  }

  send_result try_send(const outgoing& m) {
    try {
      auto r = sock.send(zmq::buffer(m.client), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!r) return send_result::would_block;  // the peer's pipe is at its HWM
      // Once the routing frame is accepted, the remaining parts of the message are too.
      (void)sock.send(zmq::buffer(m.header), zmq::send_flags::sndmore);
      (void)sock.send(zmq::buffer(m.payload), zmq::send_flags::none);
      sent.fetch_add(1, std::memory_order_relaxed);
      return send_result::sent;
    } catch (const zmq::error_t&) {
      // EHOSTUNREACH (router_mandatory): the client is gone. Anything else: drop too.
      unroutable.fetch_add(1, std::memory_order_relaxed);
      return send_result::unroutable;
    }
  }

  /// Queues `m` behind its blocked peer's earlier replies; a slow reader's chunks are dropped.
  void hold(blocked_peer& b, outgoing&& m) {
    if (b.slow && (m.chunk || b.queue.size() >= params.outbox_capacity)) {
      stalled.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    b.queue.push_back(std::move(m));
    // NOTE(transport): a peer that falls this far behind is slow now, not after the timeout,
    // so its queue stays bounded by the outbox's size.
    if (!b.slow && b.queue.size() > params.outbox_capacity) declare_slow(b.queue.front().client, b);
  }

  /// The peer read nothing for stall_timeout_ms (or fell an outbox behind): its queued chunks
  /// are dropped, the rest (finals, errors, acks) kept behind one resource_exhausted error
  /// that says so, later chunks dropped until it has read everything, and the owner told once.
  void declare_slow(const client_id& client, blocked_peer& b) {
    b.slow = true;
    slow_clients.fetch_add(1, std::memory_order_relaxed);
    std::deque<outgoing> kept;
    for (outgoing& m : b.queue) {
      if (m.chunk) {
        stalled.fetch_add(1, std::memory_order_relaxed);
      } else {
        kept.push_back(std::move(m));
      }
    }
    b.queue = std::move(kept);
    protocol::error_reply e;
    e.code = status_code::resource_exhausted;
    e.message = "this client read nothing for " + std::to_string(params.stall_timeout_ms) +
                " ms while its replies waited at the send limit: its generations are aborted and their "
                "chunks from here on dropped (each still gets its final)";
    auto enc = protocol::encode_reply(protocol::reply{e});
    if (enc.ok()) b.queue.push_front({client, enc->header, std::move(enc->payload), false});
    HART_LOG_WARN("client %s is a slow reader: its generations are aborted", printable(client).c_str());
    if (on_slow_client) {
      try {
        on_slow_client(client);
      } catch (const std::exception& ex) {  // the handler must not throw; contain it if it does
        HART_LOG_ERROR("on_slow_client threw: %s", ex.what());
      }
    }
  }

  void flush_pending() {
    const auto now = clock_type::now();
    const auto timeout = std::chrono::milliseconds(params.stall_timeout_ms);
    // Blocked peers first, each in order; a peer whose queue empties is unblocked.
    for (auto it = blocked.begin(); it != blocked.end();) {
      blocked_peer& b = it->second;
      const size_t before = b.queue.size();
      while (!b.queue.empty() && try_send(b.queue.front()) != send_result::would_block) b.queue.pop_front();
      if (b.queue.size() < before) b.since = now;  // it reads: the timeout counts from its last progress
      if (b.queue.empty()) {
        it = blocked.erase(it);
        continue;
      }
      if (!b.slow && now - b.since >= timeout) declare_slow(it->first, b);
      ++it;
    }
    while (!pending.empty()) {
      outgoing m = std::move(pending.front());
      pending.pop_front();
      if (auto it = blocked.find(m.client); it != blocked.end()) {
        hold(it->second, std::move(m));
      } else if (try_send(m) == send_result::would_block) {
        blocked_peer& b = blocked[m.client];
        b.since = now;
        b.queue.push_back(std::move(m));
      }
    }
  }

  /// A routing id for the log (ids may be binary).
  static std::string printable(const client_id& c) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned char ch : c) {
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
    return out;
  }

  void run() {
    thread_id.store(std::this_thread::get_id());
    while (!stopping.load(std::memory_order_acquire)) {
      zmq_pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      auto timeout =
          pending.empty() && blocked.empty() ? std::chrono::milliseconds(-1) : std::chrono::milliseconds(1);
      if (const auto trim = until_trim(); trim.count() >= 0 && (timeout.count() < 0 || trim < timeout))
        timeout = trim;
      try {
        zmq::poll(items, 2, timeout);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        HART_LOG_ERROR("zmq poll failed: %s", e.what());
        break;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t v;
        ssize_t n = ::read(wake_fd, &v, sizeof(v));
        (void)n;
      }
      if (stopping.load(std::memory_order_acquire)) break;
      try {
        apply_closed();
        if (items[0].revents & ZMQ_POLLIN) drain_inbound();
        {
          std::lock_guard<std::mutex> lk(mu);
          while (!outbox.empty()) {
            pending.push_back(std::move(outbox.front()));
            outbox.pop_front();
          }
        }
        space.notify_all();
        flush_pending();
        maybe_trim();
      } catch (const zmq::error_t& e) {
        HART_LOG_ERROR("zmq error: %s", e.what());
      }
    }
    sock.close();  // linger 0: queued messages are dropped
  }
};

// -- server ----------------------------------------------------------------------------------

server::server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

server::~server() {
  stop();
}

status_or<std::unique_ptr<server>> server::start(const server_params& params, request_handler on_request,
                                                 slow_client_handler on_slow_client,
                                                 disconnect_handler on_disconnect) {
  HART_RETURN_IF_ERROR(params.validate());
  if (!on_request) return invalid_argument("server::start: on_request is empty");
  auto p = std::make_unique<impl>();
  p->params = params;
  p->on_request = std::move(on_request);
  p->on_slow_client = std::move(on_slow_client);
  p->on_disconnect = std::move(on_disconnect);
  p->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) return internal_error("server::start: eventfd failed");
  try {
    auto& s = p->sock;
    s.set(zmq::sockopt::router_mandatory, 1);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::max_frame_bytes + 64));
    s.set(zmq::sockopt::sndhwm, params.send_hwm);
    s.set(zmq::sockopt::rcvhwm, params.recv_hwm);
    if (!params.curve_secret_key.empty()) {
      s.set(zmq::sockopt::curve_server, 1);
      s.set(zmq::sockopt::curve_secretkey, params.curve_secret_key);
    }
    // Every handshake goes through the ZAP handler (NULL ones too, given a domain), which reads
    // the socket's monitor: the allowlist, the connection limit and disconnects.
    zap_rules rules;
    rules.allowed_clients = params.curve_allowed_clients;
    rules.max_connections = params.max_connections;
    rules.monitor_endpoint =
        "inproc://hart-connections-" + std::to_string(reinterpret_cast<uintptr_t>(p.get()));
    if (zmq_socket_monitor(s.handle(), rules.monitor_endpoint.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return internal_error("server::start: zmq_socket_monitor failed");
    }
    impl* owner = p.get();
    rules.on_disconnected = [owner](int fd) { owner->connection_closed(fd); };
    HART_ASSIGN_OR_RETURN(p->zap, zap_authenticator::start(p->ctx, std::move(rules)));
    s.set(zmq::sockopt::zap_domain, "hart");
    s.bind(params.endpoint);
    p->endpoint = s.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("server::start: " + params.endpoint + ": " + e.what());
  }
  impl* raw = p.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<server>(new server(std::move(p)));
}

const std::string& server::endpoint() const {
  return impl_->endpoint;
}

status server::send(const client_id& client, const protocol::reply& r) {
  impl& m = *impl_;
  if (m.stopping.load(std::memory_order_acquire)) return unavailable("server: stopped");
  HART_ASSIGN_OR_RETURN(auto enc, protocol::encode_reply(r));
  size_t limit = m.params.outbox_capacity;
  if (!std::holds_alternative<protocol::chunk_event>(r)) limit += m.params.control_headroom;
  bool was_empty;
  {
    std::unique_lock<std::mutex> lk(m.mu);
    if (m.outbox.size() >= limit) {
      // The socket thread drains the outbox, so it must never wait for room itself.
      if (m.params.overflow == overflow_policy::reject || std::this_thread::get_id() == m.thread_id.load()) {
        m.rejected.fetch_add(1, std::memory_order_relaxed);
        return resource_exhausted("server: outbox full (%zu replies)", m.outbox.size());
      }
      m.space.wait(lk, [&] { return m.stopping.load() || m.outbox.size() < limit; });
      if (m.stopping.load()) return unavailable("server: stopped");
    }
    m.outbox.push_back(
        {client, enc.header, std::move(enc.payload), std::holds_alternative<protocol::chunk_event>(r)});
    was_empty = m.outbox.size() == 1;
  }
  if (was_empty) m.wake();
  return {};
}

void server::stop() {
  if (!impl_) return;
  impl_->stopping.store(true, std::memory_order_release);
  impl_->space.notify_all();
  if (impl_->thread.joinable()) {
    impl_->wake();
    impl_->thread.join();
  }
}

server_counters server::counters() const {
  const impl& m = *impl_;
  server_counters c;
  c.received = m.received.load(std::memory_order_relaxed);
  c.decode_errors = m.decode_errors.load(std::memory_order_relaxed);
  c.sent = m.sent.load(std::memory_order_relaxed);
  c.unroutable = m.unroutable.load(std::memory_order_relaxed);
  c.stalled = m.stalled.load(std::memory_order_relaxed);
  c.rejected = m.rejected.load(std::memory_order_relaxed);
  c.slow_clients = m.slow_clients.load(std::memory_order_relaxed);
  c.auth_refused = m.zap ? m.zap->refused() : 0;
  c.connections_refused = m.zap ? m.zap->refused_connections() : 0;
  c.connections = m.zap ? m.zap->connections() : 0;
  c.disconnects = m.disconnects.load(std::memory_order_relaxed);
  return c;
}

}  // namespace hart::transport
