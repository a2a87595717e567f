#include "runtime/transport/client.h"

#include "runtime/protocol/codec.h"
#include "runtime/protocol/routing_parts.h"
#include "runtime/protocol/validate.h"
#include "runtime/transport/curve_auth.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <deque>

namespace hart::transport {

namespace {
status unavailable(std::string msg) {
  return status(status_code::unavailable, std::move(msg));
}
}  // namespace

struct client::impl {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  std::deque<protocol::reply> backlog;  ///< replies received by generate() for other requests
};

client::client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
client::~client() = default;

status_or<std::unique_ptr<client>> client::connect(const client_params& params) {
  auto p = std::make_unique<impl>();
  try {
    auto& s = p->sock;
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::max_frame_bytes + 64));
    if (!params.routing_id.empty()) s.set(zmq::sockopt::routing_id, params.routing_id);
    HART_RETURN_IF_ERROR(curve_client_setup(s, params.curve_server_key, params.curve_secret_key));
    s.connect(params.endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("client::connect: " + params.endpoint + ": " + e.what());
  }
  return std::unique_ptr<client>(new client(std::move(p)));
}

status client::send(const protocol::request& r) {
  HART_RETURN_IF_ERROR(protocol::validate_request(r));
  HART_ASSIGN_OR_RETURN(auto enc, protocol::encode_request(r));
  try {
    (void)impl_->sock.send(zmq::buffer(enc.header), zmq::send_flags::sndmore);
    (void)impl_->sock.send(zmq::buffer(enc.payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("client::send: ") + e.what());
  }
  return {};
}

status client::send_frames(const std::vector<std::string>& frames) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      (void)impl_->sock.send(zmq::buffer(frames[i]), flags);
    }
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("client::send_frames: ") + e.what());
  }
  return {};
}

status_or<protocol::reply> client::receive(std::chrono::milliseconds timeout) {
  if (!impl_->backlog.empty()) {
    protocol::reply r = std::move(impl_->backlog.front());
    impl_->backlog.pop_front();
    return r;
  }
  std::vector<zmq::message_t> frames;
  try {
    zmq_pollitem_t item{impl_->sock.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return unavailable("client: timed out waiting for a reply");
    if (!zmq::recv_multipart(impl_->sock, std::back_inserter(frames), zmq::recv_flags::dontwait))
      return unavailable("client: no reply");
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("client::receive: ") + e.what());
  }
  if (frames.size() != 2)
    return invalid_argument("client: reply has %zu frames, expected [header][payload]", frames.size());
  return protocol::decode_reply({frames[0].data(), frames[0].size()}, {frames[1].data(), frames[1].size()});
}

status_or<generation_result> client::generate(
    const protocol::generate_request& g, std::chrono::milliseconds timeout,
    const std::function<void(const protocol::chunk_event&)>& on_chunk,
    const std::function<bool()>& cancelled) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  // Replies for other requests that arrive meanwhile are kept here, then re-queued in order.
  std::deque<protocol::reply> others;
  auto finish = [&](auto result) {
    for (auto& r : others) impl_->backlog.push_back(std::move(r));
    return result;
  };
  HART_RETURN_IF_ERROR(send(protocol::request{g}));
  generation_result out;
  out.samples.resize(g.sampling.n);
  std::vector<bool> done(g.sampling.n, false);
  uint32_t n_done = 0;
  protocol::routing_assembler routing;  // routing too long for a final arrives in parts before it
  bool abort_sent = false;
  const uint64_t abort_tag = g.request_id;
  while (n_done < g.sampling.n) {
    if (cancelled && !abort_sent && cancelled()) {
      protocol::control_request abort;
      abort.tag = abort_tag;
      abort.verb = protocol::control_verb::abort;
      abort.request_id = g.request_id;
      if (status st = send(protocol::request{abort}); !st.ok())
        return finish(status_or<generation_result>(st));
      abort_sent = true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    if (cancelled) left = std::min(left, std::chrono::milliseconds(100));
    auto rep = receive(left);
    if (!rep.ok()) {
      // With `cancelled`, a short wait that timed out or met a signal: ask again, until the deadline.
      if (cancelled && rep.get_status().code() == status_code::unavailable && clock::now() < deadline)
        continue;
      return finish(status_or<generation_result>(rep.get_status()));
    }
    protocol::reply& r = *rep;
    if (auto* c = std::get_if<protocol::chunk_event>(&r); c && c->request_id == g.request_id) {
      if (c->sample_index >= g.sampling.n || done[c->sample_index])
        return finish(status_or<generation_result>(
            invalid_argument("chunk for sample %u out of range or after its final", c->sample_index)));
      sample_output& s = out.samples[c->sample_index];
      if (c->seq != s.n_chunks)
        return finish(status_or<generation_result>(
            data_loss("sample %u: chunk seq %u, expected %u", c->sample_index, c->seq, s.n_chunks)));
      ++s.n_chunks;
      s.token_ids.insert(s.token_ids.end(), c->token_ids.begin(), c->token_ids.end());
      s.text += c->text;
      s.logprobs.insert(s.logprobs.end(), c->logprobs.begin(), c->logprobs.end());
      if (on_chunk) on_chunk(*c);
    } else if (auto* f = std::get_if<protocol::final_event>(&r); f && f->request_id == g.request_id) {
      if (f->sample_index >= g.sampling.n || done[f->sample_index])
        return finish(status_or<generation_result>(
            invalid_argument("final for sample %u out of range or repeated", f->sample_index)));
      if (status st = routing.complete(f); !st.ok())
        return finish(status_or<generation_result>(data_loss("%s", st.message().c_str())));
      done[f->sample_index] = true;
      ++n_done;
      out.samples[f->sample_index].final = std::move(*f);
    } else if (auto* p = std::get_if<protocol::routing_part>(&r); p && p->request_id == g.request_id) {
      if (p->sample_index >= g.sampling.n || done[p->sample_index])
        return finish(status_or<generation_result>(
            invalid_argument("routing part for sample %u out of range or after its final", p->sample_index)));
      if (status st = routing.add(std::move(*p)); !st.ok())
        return finish(status_or<generation_result>(data_loss("%s", st.message().c_str())));
    } else if (auto* e = std::get_if<protocol::error_reply>(&r);
               e && (e->request_id == g.request_id || e->request_id == 0)) {
      return finish(status_or<generation_result>(status(e->code, e->message)));
    } else if (auto* a = std::get_if<protocol::ack_reply>(&r); a && abort_sent && a->tag == abort_tag) {
      continue;  // our abort's ack
    } else {
      others.push_back(std::move(r));
    }
  }
  return finish(status_or<generation_result>(std::move(out)));
}

}  // namespace hart::transport
