#include "runtime/protocol/wire_convert.h"

#include "runtime/core/utf8.h"
#include "runtime/protocol/sampling_wire.h"

#include <type_traits>

namespace hart::protocol::internal {
namespace {

// -- helpers ---------------------------------------------------------------------------------

kj::StringPtr text_ptr(const std::string& s) {
  return kj::StringPtr(s.data(), s.size());
}

std::string to_string(capnp::Text::Reader t) {
  return std::string(t.begin(), t.size());
}

template <typename E>
uint16_t raw(E e) {
  return static_cast<uint16_t>(e);
}

template <typename List>
void fill_u32(List out, const std::vector<uint32_t>& in) {
  for (size_t i = 0; i < in.size(); ++i) out.set(static_cast<unsigned>(i), in[i]);
}

std::vector<uint32_t> read_u32(capnp::List<uint32_t>::Reader in) {
  std::vector<uint32_t> out;
  out.reserve(in.size());
  for (uint32_t v : in) out.push_back(v);
  return out;
}

// status_code <-> ErrorCode are value-for-value equal (hart.capnp says so).
static_assert(static_cast<int>(status_code::unimplemented) ==
              static_cast<int>(wire::ErrorCode::UNIMPLEMENTED));
static_assert(static_cast<int>(status_code::invalid_argument) ==
              static_cast<int>(wire::ErrorCode::INVALID_ARGUMENT));
static_assert(static_cast<int>(status_code::internal) == static_cast<int>(wire::ErrorCode::INTERNAL));

wire::Verb to_wire_verb(control_verb v) {
  switch (v) {
    case control_verb::abort:
      return wire::Verb::ABORT;
    case control_verb::pause:
      return wire::Verb::PAUSE;
    case control_verb::resume:
      return wire::Verb::RESUME;
    case control_verb::flush_cache:
      return wire::Verb::FLUSH_CACHE;
    default:
      return static_cast<wire::Verb>(0xffff);  // not an ack verb: decodes as invalid
  }
}

// -- requests: write -------------------------------------------------------------------------

void write_generate(const generate_request& g, wire::GenerateRequest::Builder o) {
  o.setRequestId(g.request_id);
  auto p = o.initPrompt();
  switch (g.kind) {
    case prompt_kind::token_ids:
      fill_u32(p.initTokenIds(static_cast<unsigned>(g.token_ids.size())), g.token_ids);
      break;
    case prompt_kind::messages: {
      auto l = p.initMessages(static_cast<unsigned>(g.messages.size()));
      for (size_t i = 0; i < g.messages.size(); ++i) {
        l[static_cast<unsigned>(i)].setRole(text_ptr(g.messages[i].role));
        l[static_cast<unsigned>(i)].setContent(text_ptr(g.messages[i].content));
        if (!g.messages[i].reasoning.empty())
          l[static_cast<unsigned>(i)].setReasoning(text_ptr(g.messages[i].reasoning));
      }
      break;
    }
    case prompt_kind::text:
      p.setText(text_ptr(g.text));
      break;
  }
  sampling_write(g.sampling, o.initSampling());
  if (!g.session_id.empty()) o.setSessionId(text_ptr(g.session_id));
  o.setPriority(g.priority);
  o.setReturnRouting(g.return_routing);
  o.setReturnIndexerPicks(g.return_indexer_picks);
  o.setThinking(g.thinking);
  o.setReasoningEffort(static_cast<wire::ReasoningEffort>(g.effort));
  o.setLogprobStartLen(g.logprob_start);
}

void write_control(const control_request& c, wire::Request::Builder o) {
  o.setTag(c.tag);
  switch (c.verb) {
    case control_verb::abort: {
      auto a = o.initAbort();
      if (c.all)
        a.setAll();
      else
        a.setRequestId(c.request_id);
      break;
    }
    case control_verb::pause:
      o.initPause().setMode(static_cast<wire::PauseMode>(raw(c.mode)));
      break;
    case control_verb::resume:
      o.setResume();
      break;
    case control_verb::flush_cache:
      o.setFlushCache();
      break;
    case control_verb::health:
      o.setHealth();
      break;
    case control_verb::stats:
      o.setStats();
      break;
    case control_verb::weight_version:
      o.setWeightVersion();
      break;
  }
}

// -- requests: read --------------------------------------------------------------------------

status_or<generate_request> read_generate(wire::GenerateRequest::Reader in) {
  generate_request g;
  g.request_id = in.getRequestId();
  auto p = in.getPrompt();
  switch (p.which()) {
    case wire::GenerateRequest::Prompt::TOKEN_IDS: {
      auto t = p.getTokenIds();
      if (t.size() > max_prompt_tokens)
        return invalid_argument("prompt.tokenIds: %u tokens, limit %zu", t.size(), max_prompt_tokens);
      g.kind = prompt_kind::token_ids;
      g.token_ids = read_u32(t);
      break;
    }
    case wire::GenerateRequest::Prompt::MESSAGES: {
      auto m = p.getMessages();
      if (m.size() > max_chat_messages)
        return invalid_argument("prompt.messages: %u messages, limit %zu", m.size(), max_chat_messages);
      g.kind = prompt_kind::messages;
      size_t total = 0;
      for (auto msg : m) {
        auto role = msg.getRole();
        auto content = msg.getContent();
        auto reasoning = msg.getReasoning();
        total += content.size() + reasoning.size();
        if (role.size() > max_role_bytes || total > max_prompt_text_bytes)
          return invalid_argument("prompt.messages: role over %zu bytes or contents over %zu bytes",
                                  max_role_bytes, max_prompt_text_bytes);
        g.messages.push_back({to_string(role), to_string(content), to_string(reasoning)});
      }
      break;
    }
    case wire::GenerateRequest::Prompt::TEXT: {
      auto t = p.getText();
      if (t.size() > max_prompt_text_bytes)
        return invalid_argument("prompt.text: %zu bytes, limit %zu", t.size(), max_prompt_text_bytes);
      g.kind = prompt_kind::text;
      g.text = to_string(t);
      break;
    }
    default:
      return invalid_argument("prompt: unknown union member %u", raw(p.which()));
  }
  HART_ASSIGN_OR_RETURN(g.sampling, sampling_read(in.getSampling()));
  auto sid = in.getSessionId();
  if (sid.size() > max_session_id_bytes)
    return invalid_argument("sessionId: %zu bytes, limit %zu", sid.size(), max_session_id_bytes);
  g.session_id = to_string(sid);
  g.priority = in.getPriority();
  g.return_routing = in.getReturnRouting();
  g.return_indexer_picks = in.getReturnIndexerPicks();
  g.thinking = in.getThinking();
  const auto effort = in.getReasoningEffort();
  if (raw(effort) > raw(wire::ReasoningEffort::MAX))
    return invalid_argument("reasoningEffort: unknown value %u", raw(effort));
  g.effort = static_cast<reasoning_effort>(effort);
  g.logprob_start = in.getLogprobStartLen();
  return g;
}

}  // namespace

void write_request(const request& in, wire::Request::Builder out) {
  if (const auto* g = std::get_if<generate_request>(&in)) {
    write_generate(*g, out.initGenerate());
  } else {
    write_control(std::get<control_request>(in), out);
  }
}

status_or<request> read_request(wire::Request::Reader in) {
  control_request c;
  c.tag = in.getTag();
  switch (in.which()) {
    case wire::Request::GENERATE: {
      HART_ASSIGN_OR_RETURN(generate_request g, read_generate(in.getGenerate()));
      return request{std::move(g)};
    }
    case wire::Request::ABORT: {
      c.verb = control_verb::abort;
      auto a = in.getAbort();
      switch (a.which()) {
        case wire::AbortRequest::REQUEST_ID:
          c.request_id = a.getRequestId();
          break;
        case wire::AbortRequest::ALL:
          c.all = true;
          break;
        default:
          return invalid_argument("abort: unknown union member %u", raw(a.which()));
      }
      return request{c};
    }
    case wire::Request::PAUSE: {
      c.verb = control_verb::pause;
      uint16_t m = raw(in.getPause().getMode());
      if (m > raw(wire::PauseMode::IN_PLACE)) return invalid_argument("pause.mode: unknown value %u", m);
      c.mode = static_cast<pause_mode>(m);
      return request{c};
    }
    case wire::Request::RESUME:
      c.verb = control_verb::resume;
      return request{c};
    case wire::Request::FLUSH_CACHE:
      c.verb = control_verb::flush_cache;
      return request{c};
    case wire::Request::HEALTH:
      c.verb = control_verb::health;
      return request{c};
    case wire::Request::STATS:
      c.verb = control_verb::stats;
      return request{c};
    case wire::Request::WEIGHT_VERSION:
      c.verb = control_verb::weight_version;
      return request{c};
  }
  return invalid_argument("request: unknown kind %u", raw(in.which()));
}

// -- replies ---------------------------------------------------------------------------------

void write_reply(const reply& in, wire::Reply::Builder out) {
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, chunk_event>) {
          auto o = out.initChunk();
          o.setRequestId(r.request_id);
          o.setSampleIndex(r.sample_index);
          o.setSeq(r.seq);
          fill_u32(o.initTokenIds(static_cast<unsigned>(r.token_ids.size())), r.token_ids);
          o.setText(text_ptr(r.text));
          if (!r.logprobs.empty()) {
            auto l = o.initLogprobs(static_cast<unsigned>(r.logprobs.size()));
            for (size_t i = 0; i < r.logprobs.size(); ++i) l.set(static_cast<unsigned>(i), r.logprobs[i]);
          }
          if (!r.top_logprobs.empty()) {
            auto outer = o.initTopLogprobs(static_cast<unsigned>(r.top_logprobs.size()));
            for (size_t i = 0; i < r.top_logprobs.size(); ++i) {
              const auto& tl = r.top_logprobs[i];
              auto inner = outer.init(static_cast<unsigned>(i), static_cast<unsigned>(tl.size()));
              for (size_t k = 0; k < tl.size(); ++k) {
                inner[static_cast<unsigned>(k)].setTokenId(tl[k].token_id);
                inner[static_cast<unsigned>(k)].setLogprob(tl[k].logprob);
              }
            }
          }
          o.setWeightVersion(r.weight_version);
          o.setServerTimeUs(r.server_time_us);
        } else if constexpr (std::is_same_v<T, final_event>) {
          auto o = out.initFinal();
          o.setRequestId(r.request_id);
          o.setSampleIndex(r.sample_index);
          o.setFinishReason(static_cast<wire::FinishReason>(raw(r.reason)));
          auto u = o.initUsage();
          u.setPromptTokens(r.usage.prompt_tokens);
          u.setCompletionTokens(r.usage.completion_tokens);
          u.setCachedTokens(r.usage.cached_tokens);
          auto t = o.initTimings();
          t.setQueueUs(r.timings.queue_us);
          t.setTtftUs(r.timings.ttft_us);
          t.setTotalUs(r.timings.total_us);
          o.setWeightVersion(r.weight_version);
          // Messages may quote a client's bytes: the wire's Text is always valid UTF-8.
          if (!r.error_message.empty()) o.setErrorMessage(text_ptr(utf8_lossy(r.error_message)));
          if (r.routing.positions > 0) write_routing(r.routing, o.initRouting());
          o.setRoutingParts(r.routing_parts);
          if (!r.input_logprobs.empty()) {
            auto l = o.initInputLogprobs(static_cast<unsigned>(r.input_logprobs.size()));
            for (size_t i = 0; i < r.input_logprobs.size(); ++i)
              l.set(static_cast<unsigned>(i), r.input_logprobs[i]);
          }
        } else if constexpr (std::is_same_v<T, routing_part>) {
          auto o = out.initRoutingPart();
          o.setRequestId(r.request_id);
          o.setSampleIndex(r.sample_index);
          o.setFirstPosition(r.first_position);
          write_routing(r.routing, o.initRouting());
        } else if constexpr (std::is_same_v<T, error_reply>) {
          out.setTag(r.tag);
          auto o = out.initError();
          o.setRequestId(r.request_id);
          o.setCode(static_cast<wire::ErrorCode>(static_cast<uint16_t>(r.code)));
          o.setMessage(text_ptr(utf8_lossy(r.message)));
        } else if constexpr (std::is_same_v<T, ack_reply>) {
          out.setTag(r.tag);
          auto o = out.initAck();
          o.setVerb(to_wire_verb(r.verb));
          o.setAffected(r.affected);
        } else if constexpr (std::is_same_v<T, health_reply>) {
          out.setTag(r.tag);
          auto o = out.initHealth();
          o.setOk(r.ok);
          o.setUptimeUs(r.uptime_us);
        } else if constexpr (std::is_same_v<T, stats_reply>) {
          out.setTag(r.tag);
          auto o = out.initStats();
          auto l = o.initEntries(static_cast<unsigned>(r.entries.size()));
          for (size_t i = 0; i < r.entries.size(); ++i) {
            l[static_cast<unsigned>(i)].setName(text_ptr(r.entries[i].first));
            l[static_cast<unsigned>(i)].setValue(r.entries[i].second);
          }
          o.setPrometheus(text_ptr(r.prometheus));
          auto hl = o.initHistograms(static_cast<unsigned>(r.histograms.size()));
          for (size_t i = 0; i < r.histograms.size(); ++i) {
            const latency_histogram& h = r.histograms[i].second;
            auto w = hl[static_cast<unsigned>(i)];
            w.setName(text_ptr(r.histograms[i].first));
            auto b = w.initUpperBounds(static_cast<unsigned>(h.bounds.size()));
            for (size_t k = 0; k < h.bounds.size(); ++k) b.set(static_cast<unsigned>(k), h.bounds[k]);
            auto c = w.initCounts(static_cast<unsigned>(h.counts.size()));
            for (size_t k = 0; k < h.counts.size(); ++k) c.set(static_cast<unsigned>(k), h.counts[k]);
            w.setSum(h.sum);
            w.setCount(h.count);
          }
        } else {
          static_assert(std::is_same_v<T, weight_version_reply>);
          out.setTag(r.tag);
          out.initWeightVersion().setVersion(r.version);
        }
      },
      in);
}

namespace {

void write_layers(const std::vector<layer_routing>& in, capnp::List<wire::LayerRouting>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto l = out[static_cast<unsigned>(i)];
    l.setLayer(in[i].layer);
    l.setK(in[i].k);
    auto ids = l.initIds(static_cast<unsigned>(in[i].ids.size()));
    for (size_t j = 0; j < in[i].ids.size(); ++j) ids.set(static_cast<unsigned>(j), in[i].ids[j]);
  }
}

status_or<std::vector<layer_routing>> read_layers(capnp::List<wire::LayerRouting>::Reader in,
                                                  uint32_t positions, const char* what) {
  std::vector<layer_routing> out;
  for (auto l : in) {
    if (uint64_t(l.getIds().size()) != uint64_t(positions) * l.getK()) {
      return invalid_argument("routing.%s: layer %u holds %u ids, not %u positions x %u", what, l.getLayer(),
                              l.getIds().size(), positions, l.getK());
    }
    layer_routing r;
    r.layer = l.getLayer();
    r.k = l.getK();
    r.ids.reserve(l.getIds().size());
    for (int32_t v : l.getIds()) r.ids.push_back(v);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

void write_routing(const routing_info& r, wire::Routing::Builder out) {
  out.setPositions(r.positions);
  write_layers(r.experts, out.initExperts(static_cast<unsigned>(r.experts.size())));
  write_layers(r.picks, out.initPicks(static_cast<unsigned>(r.picks.size())));
}

status_or<routing_info> read_routing(wire::Routing::Reader in) {
  routing_info r;
  r.positions = in.getPositions();
  HART_ASSIGN_OR_RETURN(r.experts, read_layers(in.getExperts(), r.positions, "experts"));
  HART_ASSIGN_OR_RETURN(r.picks, read_layers(in.getPicks(), r.positions, "picks"));
  return r;
}

status_or<reply> read_reply(wire::Reply::Reader in) {
  uint64_t tag = in.getTag();
  switch (in.which()) {
    case wire::Reply::CHUNK: {
      auto c = in.getChunk();
      chunk_event e;
      e.request_id = c.getRequestId();
      e.sample_index = c.getSampleIndex();
      e.seq = c.getSeq();
      e.token_ids = read_u32(c.getTokenIds());
      e.text = to_string(c.getText());
      for (float f : c.getLogprobs()) e.logprobs.push_back(f);
      for (auto inner : c.getTopLogprobs()) {
        std::vector<token_logprob> tl;
        tl.reserve(inner.size());
        for (auto x : inner) tl.push_back({x.getTokenId(), x.getLogprob()});
        e.top_logprobs.push_back(std::move(tl));
      }
      e.weight_version = c.getWeightVersion();
      e.server_time_us = c.getServerTimeUs();
      return reply{std::move(e)};
    }
    case wire::Reply::FINAL: {
      auto f = in.getFinal();
      final_event e;
      e.request_id = f.getRequestId();
      e.sample_index = f.getSampleIndex();
      uint16_t reason = raw(f.getFinishReason());
      if (reason > raw(wire::FinishReason::ERROR))
        return invalid_argument("final.finishReason: unknown value %u", reason);
      e.reason = static_cast<finish_reason>(reason);
      auto u = f.getUsage();
      e.usage = {u.getPromptTokens(), u.getCompletionTokens(), u.getCachedTokens()};
      auto t = f.getTimings();
      e.timings = {t.getQueueUs(), t.getTtftUs(), t.getTotalUs()};
      e.weight_version = f.getWeightVersion();
      e.error_message = to_string(f.getErrorMessage());
      if (f.hasRouting()) {
        HART_ASSIGN_OR_RETURN(e.routing, read_routing(f.getRouting()));
      }
      e.routing_parts = f.getRoutingParts();
      if (e.routing_parts > 0 && e.routing.positions > 0) {
        return invalid_argument("final: routing both inline and in %u parts", e.routing_parts);
      }
      for (float v : f.getInputLogprobs()) e.input_logprobs.push_back(v);
      return reply{std::move(e)};
    }
    case wire::Reply::ROUTING_PART: {
      auto p = in.getRoutingPart();
      routing_part e;
      e.request_id = p.getRequestId();
      e.sample_index = p.getSampleIndex();
      e.first_position = p.getFirstPosition();
      HART_ASSIGN_OR_RETURN(e.routing, read_routing(p.getRouting()));
      if (e.routing.positions == 0) return invalid_argument("routingPart: no positions");
      return reply{std::move(e)};
    }
    case wire::Reply::ERROR: {
      auto er = in.getError();
      uint16_t code = raw(er.getCode());
      if (code > raw(wire::ErrorCode::UNIMPLEMENTED))
        return invalid_argument("error.code: unknown value %u", code);
      return reply{
          error_reply{tag, er.getRequestId(), static_cast<status_code>(code), to_string(er.getMessage())}};
    }
    case wire::Reply::ACK: {
      auto a = in.getAck();
      uint16_t v = raw(a.getVerb());
      if (v > raw(wire::Verb::FLUSH_CACHE)) return invalid_argument("ack.verb: unknown value %u", v);
      // wire::Verb lists the first four control_verb values in the same order.
      return reply{ack_reply{tag, static_cast<control_verb>(v), a.getAffected()}};
    }
    case wire::Reply::HEALTH: {
      auto h = in.getHealth();
      return reply{health_reply{tag, h.getOk(), h.getUptimeUs()}};
    }
    case wire::Reply::STATS: {
      auto s = in.getStats();
      stats_reply r;
      r.tag = tag;
      for (auto e : s.getEntries()) r.entries.emplace_back(to_string(e.getName()), e.getValue());
      r.prometheus = to_string(s.getPrometheus());
      for (auto w : s.getHistograms()) {
        latency_histogram h;
        h.bounds.clear();
        h.counts.clear();
        for (double b : w.getUpperBounds()) h.bounds.push_back(b);
        for (uint64_t c : w.getCounts()) h.counts.push_back(c);
        h.sum = w.getSum();
        h.count = w.getCount();
        const std::string name = to_string(w.getName());
        if (status st = h.validate(); !st.ok())
          return invalid_argument("stats: %s: %s", name.c_str(), st.message().c_str());
        r.histograms.emplace_back(name, std::move(h));
      }
      return reply{std::move(r)};
    }
    case wire::Reply::WEIGHT_VERSION:
      return reply{weight_version_reply{tag, in.getWeightVersion().getVersion()}};
  }
  return invalid_argument("reply: unknown kind %u", raw(in.which()));
}

}  // namespace hart::protocol::internal
