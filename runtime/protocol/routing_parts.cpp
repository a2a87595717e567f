#include "runtime/protocol/routing_parts.h"

#include <algorithm>

namespace hart::protocol {
namespace {

// Positions [p0, p1) of every layer of `in`.
std::vector<layer_routing> slice_layers(const std::vector<layer_routing>& in, uint32_t p0, uint32_t p1) {
  std::vector<layer_routing> out;
  out.reserve(in.size());
  for (const layer_routing& l : in) {
    layer_routing s{l.layer, l.k, {}};
    s.ids.assign(l.ids.begin() + int64_t(p0) * l.k, l.ids.begin() + int64_t(p1) * l.k);
    out.push_back(std::move(s));
  }
  return out;
}

bool same_layout(const std::vector<layer_routing>& a, const std::vector<layer_routing>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].layer != b[i].layer || a[i].k != b[i].k) return false;
  }
  return true;
}

void append_layers(std::vector<layer_routing>& to, std::vector<layer_routing>&& from) {
  for (size_t i = 0; i < to.size(); ++i)
    to[i].ids.insert(to[i].ids.end(), from[i].ids.begin(), from[i].ids.end());
}

}  // namespace

std::vector<routing_part> split_routing(routing_info&& routing, uint64_t request_id, uint32_t sample_index,
                                        int64_t max_ids) {
  std::vector<routing_part> parts;
  int64_t ids_per_position = 0;
  for (const auto* layers : {&routing.experts, &routing.picks}) {
    for (const layer_routing& l : *layers) ids_per_position += l.k;
  }
  const uint32_t step = uint32_t(std::max<int64_t>(1, max_ids / std::max<int64_t>(1, ids_per_position)));
  for (uint32_t p0 = 0; p0 < routing.positions; p0 += step) {
    const uint32_t p1 = std::min(routing.positions, p0 + step);
    routing_part part;
    part.request_id = request_id;
    part.sample_index = sample_index;
    part.first_position = p0;
    part.routing.positions = p1 - p0;
    part.routing.experts = slice_layers(routing.experts, p0, p1);
    part.routing.picks = slice_layers(routing.picks, p0, p1);
    parts.push_back(std::move(part));
  }
  routing = routing_info{};
  return parts;
}

status routing_assembler::add(routing_part&& part) {
  const auto key = std::make_pair(part.request_id, part.sample_index);
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    if (part.first_position != 0) {
      return invalid_argument("routing part of request %llu sample %u starts at position %u, not 0",
                              (unsigned long long)part.request_id, part.sample_index, part.first_position);
    }
    pending_[key] = joined{std::move(part.routing), 1};
    return {};
  }
  joined& j = it->second;
  if (part.first_position != j.routing.positions) {
    return invalid_argument("routing part of request %llu sample %u starts at position %u, not %u",
                            (unsigned long long)part.request_id, part.sample_index, part.first_position,
                            j.routing.positions);
  }
  if (!same_layout(j.routing.experts, part.routing.experts) ||
      !same_layout(j.routing.picks, part.routing.picks)) {
    return invalid_argument("routing part of request %llu sample %u has other layers than the ones before it",
                            (unsigned long long)part.request_id, part.sample_index);
  }
  append_layers(j.routing.experts, std::move(part.routing.experts));
  append_layers(j.routing.picks, std::move(part.routing.picks));
  j.routing.positions += part.routing.positions;
  ++j.parts;
  return {};
}

status routing_assembler::complete(final_event* f) {
  const auto key = std::make_pair(f->request_id, f->sample_index);
  auto it = pending_.find(key);
  const uint32_t got = it == pending_.end() ? 0 : it->second.parts;
  if (got != f->routing_parts) {
    if (it != pending_.end()) pending_.erase(it);
    return invalid_argument("final of request %llu sample %u announces %u routing parts, %u arrived",
                            (unsigned long long)f->request_id, f->sample_index, f->routing_parts, got);
  }
  if (it == pending_.end()) return {};
  f->routing = std::move(it->second.routing);
  pending_.erase(it);
  return {};
}

}  // namespace hart::protocol
