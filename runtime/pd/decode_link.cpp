#include "runtime/pd/decode_link.h"

#include "runtime/core/log.h"
#include "runtime/pd/link_socket.h"
#include "runtime/pd_link/pd_codec.h"

#include <zmq.hpp>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hart::pd {
namespace {

// How often the thread looks at its stop flag, at most.
constexpr int k_poll_ms = 100;

}  // namespace

struct decode_link::impl {
  std::string endpoint;
  message_fn on_message;
  bad_frame_fn on_bad_frame;
  zmq::context_t ctx;
  zmq::socket_t dealer;  // the thread's only
  /// send() wakes the thread through this pair: `wake_send` under `mu`, `wake_recv` on the thread.
  zmq::socket_t wake_send, wake_recv;
  std::mutex mu;
  std::deque<std::vector<uint8_t>> outbox;  // encoded frames, under `mu`
  std::atomic<bool> stop{false};
  std::thread thread;

  void run() {
    std::vector<zmq::pollitem_t> items = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                                          {wake_recv.handle(), 0, ZMQ_POLLIN, 0}};
    while (!stop.load()) {
      zmq::poll(items, std::chrono::milliseconds(k_poll_ms));
      if (items[1].revents & ZMQ_POLLIN) {
        zmq::message_t w;
        while (wake_recv.recv(w, zmq::recv_flags::dontwait)) {
        }
      }
      std::deque<std::vector<uint8_t>> out;
      {
        std::lock_guard<std::mutex> lock(mu);
        out.swap(outbox);
      }
      for (const std::vector<uint8_t>& f : out) {
        // A DEALER queues up to its HWM while the prefill server is unreachable;
        // past it a message is dropped here and its transfer times out.
        try {
          if (!dealer.send(zmq::buffer(f), zmq::send_flags::dontwait))
            HART_LOG_WARN("pd link %s: the send queue is full; a message is dropped", endpoint.c_str());
        } catch (const zmq::error_t& e) {
          HART_LOG_ERROR("pd link %s: send: %s", endpoint.c_str(), e.what());
        }
      }
      for (;;) {
        zmq::message_t frame;
        if (!dealer.recv(frame, zmq::recv_flags::dontwait)) break;
        status_or<pd_link::pd_message> m = pd_link::decode(frame.data(), frame.size());
        if (frame.more()) {
          zmq::message_t extra;
          while (dealer.recv(extra, zmq::recv_flags::dontwait) && extra.more()) {
          }
          m = invalid_argument("pd link: a message of more than one frame");
        }
        if (m.ok()) {
          on_message(std::move(m).value());
        } else {
          on_bad_frame(m.get_status());
        }
      }
    }
  }
};

status_or<std::unique_ptr<decode_link>> decode_link::connect(const std::string& endpoint,
                                                             message_fn on_message,
                                                             bad_frame_fn on_bad_frame) {
  auto p = std::make_unique<impl>();
  p->endpoint = endpoint;
  p->on_message = std::move(on_message);
  p->on_bad_frame = std::move(on_bad_frame);
  try {
    p->dealer = link_socket(p->ctx, zmq::socket_type::dealer);
    p->dealer.connect(endpoint);
    const std::string wake = "inproc://pd-link-wake";
    p->wake_recv = zmq::socket_t(p->ctx, zmq::socket_type::pair);
    p->wake_recv.bind(wake);
    p->wake_send = zmq::socket_t(p->ctx, zmq::socket_type::pair);
    p->wake_send.connect(wake);
  } catch (const zmq::error_t& e) {
    return invalid_argument("--prefill-endpoint %s: %s", endpoint.c_str(), e.what());
  }
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<decode_link>(new decode_link(std::move(p)));
}

decode_link::decode_link(std::unique_ptr<impl> p) : p_(std::move(p)) {}

decode_link::~decode_link() {
  p_->stop.store(true);
  {
    std::lock_guard<std::mutex> lock(p_->mu);
    (void)p_->wake_send.send(zmq::const_buffer(), zmq::send_flags::dontwait);
  }
  if (p_->thread.joinable()) p_->thread.join();
}

status decode_link::send(const pd_link::pd_message& m) {
  HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, pd_link::encode(m));
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->outbox.push_back(std::move(frame));
  (void)p_->wake_send.send(zmq::const_buffer(), zmq::send_flags::dontwait);
  return {};
}

const std::string& decode_link::endpoint() const {
  return p_->endpoint;
}

}  // namespace hart::pd
