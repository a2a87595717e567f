#include "runtime/sched/routing_trace.h"

#include <algorithm>

namespace hart::sched {
namespace {

std::vector<layer_routing> slice_layers(const std::map<int64_t, std::vector<int32_t>>& all,
                                        int64_t n_call_tokens, int64_t row0, int64_t n) {
  std::vector<layer_routing> out;
  for (const auto& [layer, ids] : all) {
    if (n_call_tokens <= 0) break;
    layer_routing l;
    l.layer = int32_t(layer);
    l.k = int32_t(int64_t(ids.size()) / n_call_tokens);
    l.ids.assign(ids.begin() + row0 * l.k, ids.begin() + (row0 + n) * l.k);
    out.push_back(std::move(l));
  }
  return out;
}

void write_layers(std::vector<layer_routing>& dst, const std::vector<layer_routing>& src, int64_t at,
                  int64_t n, int64_t positions) {
  for (const layer_routing& s : src) {
    auto it =
        std::find_if(dst.begin(), dst.end(), [&](const layer_routing& d) { return d.layer == s.layer; });
    if (it == dst.end()) {
      it = dst.insert(std::upper_bound(dst.begin(), dst.end(), s.layer,
                                       [](int32_t l, const layer_routing& d) { return l < d.layer; }),
                      layer_routing{s.layer, s.k, {}});
    }
    it->ids.resize(size_t(positions * s.k), -1);
    std::copy_n(s.ids.begin(), n * s.k, it->ids.begin() + at * s.k);
  }
}

}  // namespace

routing_trace routing_trace::slice(const std::map<int64_t, std::vector<int32_t>>& experts,
                                   const std::map<int64_t, std::vector<int32_t>>& picks,
                                   int64_t n_call_tokens, int64_t row0, int64_t n) {
  routing_trace t;
  t.positions = n;
  t.experts = slice_layers(experts, n_call_tokens, row0, n);
  t.picks = slice_layers(picks, n_call_tokens, row0, n);
  return t;
}

void routing_trace::write(const routing_trace& part, int64_t at) {
  positions = std::max(positions, at + part.positions);
  write_layers(experts, part.experts, at, part.positions, positions);
  write_layers(picks, part.picks, at, part.positions, positions);
  for (auto* layers : {&experts, &picks}) {
    for (layer_routing& l : *layers) l.ids.resize(size_t(positions * l.k), -1);
  }
}

void routing_trace::truncate(int64_t n) {
  if (n >= positions) return;
  positions = std::max<int64_t>(n, 0);
  for (auto* layers : {&experts, &picks}) {
    for (layer_routing& l : *layers) l.ids.resize(size_t(positions * l.k));
  }
}

}  // namespace hart::sched
