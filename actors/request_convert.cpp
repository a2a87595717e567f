#include "actors/request_convert.h"

#include "runtime/protocol/routing_parts.h"
#include "runtime/text/chat_template.h"

#include <algorithm>
#include <cstdint>

namespace hart::actors {

status_or<sched::gen_request> to_gen_request(const protocol::generate_request& g, uint64_t id,
                                             const tokenizer* tok, int64_t vocab_size, int64_t max_context) {
  sched::gen_request r;
  r.id = g.request_id;  // until validated: its messages name the id the client knows
  switch (g.kind) {
    case protocol::prompt_kind::token_ids:
      for (uint32_t t : g.token_ids) {
        if (int64_t(t) >= vocab_size) {
          return out_of_range("token id %u is outside the vocabulary [0, %lld)", t, (long long)vocab_size);
        }
        r.prompt.push_back(int32_t(t));
      }
      break;
    case protocol::prompt_kind::messages: {
      if (!tok) return failed_precondition("this server has no tokenizer: send token ids");
      std::vector<chat_message> msgs;
      for (const protocol::chat_message& m : g.messages) msgs.push_back({m.role, m.content, m.reasoning});
      // DeepSeek-V4's encoding: chat mode unless the request asks for thinking (as SGLang and vLLM).
      chat_options co;
      co.thinking = g.thinking ? thinking_mode::think : thinking_mode::no_think;
      co.reasoning_effort_max = g.effort == protocol::reasoning_effort::max;
      HART_ASSIGN_OR_RETURN(std::string text, chat_encode(msgs, co));
      HART_ASSIGN_OR_RETURN(r.prompt, tok->encode(text));
      break;
    }
    case protocol::prompt_kind::text: {
      if (!tok) return failed_precondition("this server has no tokenizer: send token ids");
      HART_ASSIGN_OR_RETURN(r.prompt, tok->encode(g.text));
      if (tok->config().add_bos_token && tok->config().bos_id)
        r.prompt.insert(r.prompt.begin(), *tok->config().bos_id);
      break;
    }
  }
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  const protocol::sampling_options& s = g.sampling;
  r.temperature = s.temperature;
  r.top_p = s.top_p;
  r.top_k = s.top_k < 0 ? 0 : s.top_k;
  r.min_p = s.min_p;
  // Without a seed, sampling still differs per request but replays from the id.
  r.seed = s.has_seed ? s.seed : id * 0x9E3779B97F4A7C15ull;
  r.max_new_tokens = s.max_new_tokens;
  r.min_new_tokens = s.min_new_tokens;
  r.stop = s.stop;
  for (uint32_t t : s.stop_token_ids) {
    if (int64_t(t) >= vocab_size) {
      return out_of_range("stop token id %u is outside the vocabulary [0, %lld)", t, (long long)vocab_size);
    }
    r.stop_token_ids.push_back(int32_t(t));
  }
  r.ignore_eos = s.ignore_eos;
  r.n = int32_t(s.n);
  r.logprobs = s.logprobs || s.top_logprobs > 0;
  r.top_logprobs = s.top_logprobs;
  r.priority = g.priority;
  r.return_routing = g.return_routing;
  r.logprob_start = g.logprob_start;
  r.return_indexer_picks = g.return_indexer_picks;
  HART_RETURN_IF_ERROR(r.validate(int32_t(std::min<int64_t>(vocab_size, INT32_MAX)), max_context));
  r.id = id;
  return r;
}

protocol::finish_reason to_wire(sched::finish_reason r) {
  switch (r) {
    case sched::finish_reason::stop:
      return protocol::finish_reason::stop;
    case sched::finish_reason::length:
      return protocol::finish_reason::length;
    case sched::finish_reason::abort:
      return protocol::finish_reason::abort;
    case sched::finish_reason::error:
      return protocol::finish_reason::error;
  }
  return protocol::finish_reason::error;
}

protocol::chunk_event to_chunk(const sched::token_event& e, uint64_t client_request_id, uint32_t seq,
                               bool logprobs, bool top_logprobs) {
  protocol::chunk_event c;
  c.request_id = client_request_id;
  c.sample_index = uint32_t(e.sample);
  c.seq = seq;
  c.token_ids = {uint32_t(e.token)};
  c.text = e.text;
  c.server_time_us = uint64_t(std::max<int64_t>(0, e.produced_us));
  if (logprobs) c.logprobs = {e.logprob};
  if (top_logprobs) {
    std::vector<protocol::token_logprob> top;
    for (const sched::token_logprob& t : e.top_logprobs) top.push_back({uint32_t(t.token), t.logprob});
    c.top_logprobs = {std::move(top)};
  }
  return c;
}

protocol::final_event to_final(const sched::finish_event& e, uint64_t client_request_id,
                               int64_t max_routing_ids, std::vector<protocol::routing_part>* parts) {
  parts->clear();
  protocol::final_event f;
  f.request_id = client_request_id;
  f.sample_index = uint32_t(e.sample);
  f.reason = to_wire(e.reason);
  f.usage = {uint32_t(e.prompt_tokens), uint32_t(e.completion_tokens), uint32_t(e.cached_tokens)};
  f.timings = {uint64_t(std::max<int64_t>(0, e.queued_us)), uint64_t(std::max<int64_t>(0, e.ttft_us)),
               uint64_t(std::max<int64_t>(0, e.total_us))};
  if (e.reason == sched::finish_reason::error) f.error_message = e.message;
  f.input_logprobs = e.input_logprobs;
  if (e.routing.positions > 0) {
    protocol::routing_info r;
    r.positions = uint32_t(e.routing.positions);
    int64_t n_ids = 0;
    auto copy = [&](const std::vector<sched::layer_routing>& in, std::vector<protocol::layer_routing>& out) {
      for (const sched::layer_routing& l : in) {
        out.push_back({uint32_t(l.layer), uint32_t(l.k), l.ids});
        n_ids += int64_t(l.ids.size());
      }
    };
    copy(e.routing.experts, r.experts);
    copy(e.routing.picks, r.picks);
    if (n_ids <= max_routing_ids) {
      f.routing = std::move(r);
    } else {
      *parts = protocol::split_routing(std::move(r), client_request_id, f.sample_index, max_routing_ids);
      f.routing_parts = uint32_t(parts->size());
    }
  }
  return f;
}

}  // namespace hart::actors
