#include "runtime/pd/link_socket.h"

#include "runtime/pd_link/pd_codec.h"

namespace hart::pd {

zmq::socket_t link_socket(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, int64_t(pd_link::max_frame_bytes + 64));
  if (type == zmq::socket_type::router) s.set(zmq::sockopt::router_mandatory, 1);
  return s;
}

status link_send_frame(zmq::socket_t& s, const zmq::message_t* routing_id,
                       const std::vector<uint8_t>& frame) {
  try {
    if (routing_id && !s.send(zmq::buffer(routing_id->data(), routing_id->size()),
                              zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return unavailable("pd link: the peer cannot take a message now");
    if (!s.send(zmq::buffer(frame), zmq::send_flags::dontwait))
      return unavailable("pd link: the peer cannot take a message now");
  } catch (const zmq::error_t& e) {
    return unavailable("pd link: %s", e.what());  // EHOSTUNREACH: the ROUTER does not know the peer
  }
  return {};
}

status link_send(zmq::socket_t& s, const zmq::message_t* routing_id, const pd_link::pd_message& m) {
  HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, pd_link::encode(m));
  return link_send_frame(s, routing_id, frame);
}

protocol::sampling_options link_sampling(const sched::gen_request& r) {
  protocol::sampling_options o;
  o.temperature = r.temperature;
  o.top_p = r.top_p;
  o.top_k = r.top_k > 0 ? int32_t(r.top_k) : -1;
  o.min_p = r.min_p;
  o.has_seed = true;
  o.seed = r.seed;
  o.max_new_tokens = 1;
  o.logprobs = r.logprobs;
  o.top_logprobs = uint8_t(r.top_logprobs);
  return o;
}

sched::gen_request link_request(const pd_link::prefill_request& p) {
  sched::gen_request r;
  r.prompt = p.tokens;
  r.temperature = p.sampling.temperature;
  r.top_p = p.sampling.top_p;
  r.top_k = p.sampling.top_k > 0 ? p.sampling.top_k : 0;
  r.min_p = p.sampling.min_p;
  r.seed = p.sampling.seed;
  r.max_new_tokens = 1;
  r.logprobs = p.sampling.logprobs;
  r.top_logprobs = p.sampling.top_logprobs;
  return r;
}

}  // namespace hart::pd
