#include "runtime/protocol/sampling_wire.h"

namespace hart::protocol {

void sampling_write(const sampling_options& s, wire::SamplingParams::Builder o) {
  o.setTemperature(s.temperature);
  o.setTopP(s.top_p);
  o.setTopK(s.top_k);
  o.setMinP(s.min_p);
  o.setSeed(s.seed);
  o.setHasSeed(s.has_seed);
  o.setMaxNewTokens(s.max_new_tokens);
  o.setMinNewTokens(s.min_new_tokens);
  if (!s.stop.empty()) {
    auto l = o.initStop(static_cast<unsigned>(s.stop.size()));
    for (size_t i = 0; i < s.stop.size(); ++i)
      l.set(static_cast<unsigned>(i), kj::StringPtr(s.stop[i].data(), s.stop[i].size()));
  }
  if (!s.stop_token_ids.empty()) {
    auto l = o.initStopTokenIds(static_cast<unsigned>(s.stop_token_ids.size()));
    for (size_t i = 0; i < s.stop_token_ids.size(); ++i) l.set(static_cast<unsigned>(i), s.stop_token_ids[i]);
  }
  o.setIgnoreEos(s.ignore_eos);
  o.setN(s.n);
  o.setLogprobs(s.logprobs);
  o.setTopLogprobs(s.top_logprobs);
}

status_or<sampling_options> sampling_read(wire::SamplingParams::Reader in) {
  sampling_options s;
  s.temperature = in.getTemperature();
  s.top_p = in.getTopP();
  s.top_k = in.getTopK();
  s.min_p = in.getMinP();
  s.seed = in.getSeed();
  s.has_seed = in.getHasSeed();
  s.max_new_tokens = in.getMaxNewTokens();
  s.min_new_tokens = in.getMinNewTokens();
  // NOTE(protocol): counts are checked before copying, so a huge list costs no allocation.
  auto stop = in.getStop();
  if (stop.size() > max_stop_strings)
    return invalid_argument("sampling.stop: %u strings, limit %zu", stop.size(), max_stop_strings);
  for (auto t : stop) s.stop.emplace_back(t.begin(), t.size());
  auto ids = in.getStopTokenIds();
  if (ids.size() > max_stop_token_ids)
    return invalid_argument("sampling.stopTokenIds: %u ids, limit %zu", ids.size(), max_stop_token_ids);
  s.stop_token_ids.reserve(ids.size());
  for (uint32_t id : ids) s.stop_token_ids.push_back(id);
  s.ignore_eos = in.getIgnoreEos();
  s.n = in.getN();
  s.logprobs = in.getLogprobs();
  s.top_logprobs = in.getTopLogprobs();
  return s;
}

}  // namespace hart::protocol
