#include "runtime/weight_sync/sync_server.h"

#include "runtime/core/log.h"
#include "runtime/transport/curve_auth.h"
#include "runtime/transport/server.h"
#include "runtime/weight_sync/crc_pool.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

namespace hart::weight_sync {

status sync_server_params::validate() const {
  if (endpoint.empty()) return invalid_argument("weight sync endpoint: empty");
  if (!curve_allowed_clients.empty() && curve_secret_key.empty()) {
    return invalid_argument("weight sync: an allowlist of client keys needs a CURVE secret key");
  }
  if (curve_secret_key.empty() && !transport::endpoint_is_local(endpoint)) {
    return failed_precondition("weight sync endpoint %s is not loopback; binding it needs a CURVE secret key",
                               endpoint.c_str());
  }
  if (max_inflight_bytes < k_max_chunk_bytes) return invalid_argument("max_inflight_bytes below one chunk");
  return {};
}

struct sync_server::impl {
  sync_server_params params;
  sync_handler on_message;
  // One receive thread per client connection, up to a quarter of the cores (a
  // client's lanes are received in parallel; the kernel's copy is the cost).
  zmq::context_t ctx{crc_pool_default_threads()};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::unique_ptr<transport::zap_authenticator> zap;  // with curve_allowed_clients; goes before ctx
  int wake_fd = -1;
  std::string endpoint;
  std::mutex mu;  // guards outbox
  std::deque<std::pair<std::string, std::vector<uint8_t>>> outbox;
  std::atomic<bool> stopping{false};
  /// Data frames handed over and still alive; shared with the messages, which may outlive the server.
  std::shared_ptr<std::atomic<uint64_t>> inflight_bytes = std::make_shared<std::atomic<uint64_t>>(0);
  std::thread thread;

  ~impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd, &one, sizeof one);
    (void)n;  // EAGAIN: already signalled
  }

  void reply_now(const std::string& client, const sync_reply& r) {
    auto enc = encode_reply(r);
    if (!enc.ok()) return;
    const auto h = reply_header();
    try {
      (void)sock.send(zmq::buffer(client), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      (void)sock.send(zmq::buffer(h), zmq::send_flags::sndmore);
      (void)sock.send(zmq::buffer(*enc), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      // EHOSTUNREACH: the client went away; nothing to tell it.
    }
  }

  void handle(std::vector<zmq::message_t>&& frames) {
    std::string client(frames[0].data<char>(), frames[0].size());
    sync_reply err;
    err.phase = sync_phase::frame;
    if (frames.size() < 3) {
      err.code = status_code::invalid_argument;
      err.message =
          "frames: got " + std::to_string(frames.size() - 1) + ", expected [header][payload][data...]";
      reply_now(client, err);
      return;
    }
    auto msg = std::make_shared<inbound_sync>();
    msg->client = std::move(client);
    uint64_t n_data = 0;
    for (size_t i = 3; i < frames.size(); ++i) {
      msg->data.push_back({frames[i].data(), frames[i].size()});
      n_data += frames[i].size();
    }
    auto req =
        decode_request({frames[1].data(), frames[1].size()}, {frames[2].data(), frames[2].size()}, msg->data);
    if (!req.ok()) {
      err.code = req.get_status().code();
      err.message = req.get_status().message();
      reply_now(msg->client, err);
      return;
    }
    msg->request = std::move(req).value();
    inflight_bytes->fetch_add(n_data);
    // The frames live as long as the message; releasing them gives the budget back.
    auto held = new std::vector<zmq::message_t>(std::move(frames));
    std::shared_ptr<std::atomic<uint64_t>> counter = inflight_bytes;
    msg->owner = std::shared_ptr<void>(held, [counter, n_data](void* p) {
      delete static_cast<std::vector<zmq::message_t>*>(p);
      counter->fetch_sub(n_data);
    });
    on_message(std::move(msg));
  }

  void run() {
    while (!stopping.load()) {
      const bool room = inflight_bytes->load() < params.max_inflight_bytes;
      zmq_pollitem_t items[2] = {{sock.handle(), 0, short(room ? ZMQ_POLLIN : 0), 0},
                                 {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(room ? -1 : 1));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        HART_LOG_ERROR("weight sync poll failed: %s", e.what());
        break;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t v;
        ssize_t n = ::read(wake_fd, &v, sizeof v);
        (void)n;
      }
      if (stopping.load()) break;
      try {
        for (int i = 0;
             i < 64 && (items[0].revents & ZMQ_POLLIN) && inflight_bytes->load() < params.max_inflight_bytes;
             ++i) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(sock, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          if (!frames.empty()) handle(std::move(frames));
        }
        std::deque<std::pair<std::string, std::vector<uint8_t>>> out;
        {
          std::lock_guard<std::mutex> lk(mu);
          out.swap(outbox);
        }
        const auto h = reply_header();
        for (auto& [client, payload] : out) {
          try {
            (void)sock.send(zmq::buffer(client), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
            (void)sock.send(zmq::buffer(h), zmq::send_flags::sndmore);
            (void)sock.send(zmq::buffer(payload), zmq::send_flags::none);
          } catch (const zmq::error_t&) {
            // the client is gone (router_mandatory)
          }
        }
      } catch (const zmq::error_t& e) {
        HART_LOG_ERROR("weight sync socket: %s", e.what());
      }
    }
    sock.close();
  }
};

sync_server::sync_server(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
sync_server::~sync_server() {
  stop();
}

status_or<std::unique_ptr<sync_server>> sync_server::start(const sync_server_params& params,
                                                           sync_handler on_message) {
  HART_RETURN_IF_ERROR(params.validate());
  if (!on_message) return invalid_argument("sync_server::start: no handler");
  auto p = std::make_shared<impl>();
  p->params = params;
  p->on_message = std::move(on_message);
  p->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) return internal_error("sync_server::start: eventfd failed");
  try {
    p->sock.set(zmq::sockopt::router_mandatory, 1);
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.set(zmq::sockopt::maxmsgsize, int64_t(k_max_chunk_bytes));
    p->sock.set(zmq::sockopt::rcvhwm, 0);  // bounded by max_inflight_bytes instead of a message count
    if (!params.curve_secret_key.empty()) {
      p->sock.set(zmq::sockopt::curve_server, 1);
      p->sock.set(zmq::sockopt::curve_secretkey, params.curve_secret_key);
    }
    if (!params.curve_allowed_clients.empty()) {
      transport::zap_rules rules;
      rules.allowed_clients = params.curve_allowed_clients;
      HART_ASSIGN_OR_RETURN(p->zap, transport::zap_authenticator::start(p->ctx, std::move(rules)));
      p->sock.set(zmq::sockopt::zap_domain, "hart");
    }
    p->sock.bind(params.endpoint);
    p->endpoint = p->sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return status(status_code::unavailable, "weight sync endpoint " + params.endpoint + ": " + e.what());
  }
  impl* raw = p.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<sync_server>(new sync_server(std::move(p)));
}

const std::string& sync_server::endpoint() const {
  return impl_->endpoint;
}

status sync_server::send(const std::string& client, const sync_reply& r) {
  if (impl_->stopping.load()) return status(status_code::unavailable, "weight sync server stopped");
  HART_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, encode_reply(r));
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->outbox.emplace_back(client, std::move(payload));
  }
  impl_->wake();
  return {};
}

void sync_server::stop() {
  if (!impl_) return;
  impl_->stopping.store(true);
  if (impl_->thread.joinable()) {
    impl_->wake();
    impl_->thread.join();
  }
}

}  // namespace hart::weight_sync
