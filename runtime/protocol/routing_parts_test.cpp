// split_routing + routing_assembler: random routings cut at several limits
// (one position per part, a few, all in one) and sent through the codec come
// back whole; a part that does not continue where the last ended, has other
// layers, or a final announcing another count is refused.
#include "runtime/protocol/routing_parts.h"

#include "runtime/protocol/codec.h"

#include <gtest/gtest.h>

#include <random>

namespace hart::protocol {
namespace {

routing_info random_routing(std::mt19937& rng, uint32_t positions) {
  routing_info r;
  r.positions = positions;
  std::uniform_int_distribution<int32_t> id(-1, 255);
  for (uint32_t layer : {0u, 1u, 2u, 5u}) r.experts.push_back({layer, 6, {}});
  for (uint32_t layer : {1u, 3u}) r.picks.push_back({layer, 16, {}});
  for (auto* layers : {&r.experts, &r.picks}) {
    for (layer_routing& l : *layers) {
      l.ids.resize(size_t(positions) * l.k);
      for (int32_t& v : l.ids) v = id(rng);
    }
  }
  return r;
}

void expect_same(const routing_info& a, const routing_info& b) {
  EXPECT_EQ(a.positions, b.positions);
  ASSERT_EQ(a.experts.size(), b.experts.size());
  ASSERT_EQ(a.picks.size(), b.picks.size());
  for (size_t i = 0; i < a.experts.size(); ++i)
    EXPECT_EQ(a.experts[i].ids, b.experts[i].ids) << "experts " << i;
  for (size_t i = 0; i < a.picks.size(); ++i) EXPECT_EQ(a.picks[i].ids, b.picks[i].ids) << "picks " << i;
}

reply through_codec(const reply& r) {
  auto enc = encode_reply(r);
  EXPECT_TRUE(enc.ok()) << enc.get_status().to_string();
  auto dec = decode_reply(byte_view{enc->header.data(), enc->header.size()},
                          byte_view{enc->payload.data(), enc->payload.size()});
  EXPECT_TRUE(dec.ok()) << dec.get_status().to_string();
  return dec.ok() ? std::move(dec).value() : reply{};
}

// The final of sample `sample` of request `id`, nothing else set.
final_event sample_final(uint64_t id, uint32_t sample) {
  final_event f;
  f.request_id = id;
  f.sample_index = sample;
  return f;
}

TEST(routing_parts, split_then_assembled_through_the_codec_is_the_routing) {
  std::mt19937 rng(11);
  const int64_t per_position = 4 * 6 + 2 * 16;
  for (const int64_t max_ids : {int64_t(1), per_position, 3 * per_position + 5, int64_t(1) << 20}) {
    SCOPED_TRACE("max_ids=" + std::to_string(max_ids));
    const routing_info want = random_routing(rng, 37);
    routing_info cut = want;
    std::vector<routing_part> parts = split_routing(std::move(cut), 9, 2, max_ids);
    const int64_t step = std::max<int64_t>(1, max_ids / per_position);
    EXPECT_EQ(int64_t(parts.size()), (37 + step - 1) / step);
    routing_assembler a;
    for (routing_part& p : parts) {
      int64_t ids = 0;
      for (const auto& l : p.routing.experts) ids += int64_t(l.ids.size());
      for (const auto& l : p.routing.picks) ids += int64_t(l.ids.size());
      EXPECT_LE(ids, std::max(max_ids, per_position));
      routing_part back = std::get<routing_part>(through_codec(reply{p}));
      ASSERT_TRUE(a.add(std::move(back)).ok());
    }
    final_event f;
    f.request_id = 9;
    f.sample_index = 2;
    f.routing_parts = uint32_t(parts.size());
    final_event fb = std::get<final_event>(through_codec(reply{f}));
    EXPECT_EQ(fb.routing_parts, f.routing_parts);
    ASSERT_TRUE(a.complete(&fb).ok());
    expect_same(fb.routing, want);
    EXPECT_EQ(a.pending(), 0u);
  }
}

TEST(routing_parts, samples_are_joined_apart_and_a_final_without_parts_is_untouched) {
  std::mt19937 rng(12);
  const routing_info r0 = random_routing(rng, 10), r1 = random_routing(rng, 7);
  routing_info c0 = r0, c1 = r1;
  auto p0 = split_routing(std::move(c0), 4, 0, 60);
  auto p1 = split_routing(std::move(c1), 4, 1, 60);
  routing_assembler a;
  for (size_t i = 0; i < std::max(p0.size(), p1.size()); ++i) {  // interleaved
    if (i < p0.size()) {
      ASSERT_TRUE(a.add(std::move(p0[i])).ok());
    }
    if (i < p1.size()) {
      ASSERT_TRUE(a.add(std::move(p1[i])).ok());
    }
  }
  final_event plain;
  plain.request_id = 5;
  ASSERT_TRUE(a.complete(&plain).ok());
  EXPECT_EQ(plain.routing.positions, 0u);
  final_event f1 = sample_final(4, 1);
  f1.routing_parts = uint32_t(p1.size());
  ASSERT_TRUE(a.complete(&f1).ok());
  expect_same(f1.routing, r1);
  final_event f0 = sample_final(4, 0);
  f0.routing_parts = uint32_t(p0.size());
  ASSERT_TRUE(a.complete(&f0).ok());
  expect_same(f0.routing, r0);
}

TEST(routing_parts, parts_out_of_order_or_of_other_layers_and_wrong_counts_are_refused) {
  std::mt19937 rng(13);
  routing_info r = random_routing(rng, 12);
  auto parts = split_routing(std::move(r), 1, 0, 56 * 4);  // 4 positions per part
  ASSERT_EQ(parts.size(), 3u);
  routing_assembler a;
  routing_part late = parts[1];
  EXPECT_FALSE(a.add(std::move(late)).ok()) << "the first part must start at 0";
  ASSERT_TRUE(a.add(routing_part(parts[0])).ok());
  EXPECT_FALSE(a.add(routing_part(parts[2])).ok()) << "a gap";
  routing_part other = parts[1];
  other.routing.picks[0].layer = 7;
  EXPECT_FALSE(a.add(std::move(other)).ok()) << "other layers";
  ASSERT_TRUE(a.add(routing_part(parts[1])).ok()) << "the refused parts changed nothing";
  final_event f = sample_final(1, 0);
  f.routing_parts = 3;  // only 2 arrived
  EXPECT_FALSE(a.complete(&f).ok());
  EXPECT_EQ(a.pending(), 0u);
  final_event g = sample_final(1, 1);
  g.routing_parts = 1;  // parts announced, none arrived
  EXPECT_FALSE(a.complete(&g).ok());
}

TEST(routing_parts, a_part_without_positions_or_with_short_layers_does_not_decode) {
  routing_part p{3, 0, 0, {}};
  auto enc = encode_reply(reply{p});
  ASSERT_TRUE(enc.ok());
  EXPECT_FALSE(decode_reply(byte_view{enc->header.data(), enc->header.size()},
                            byte_view{enc->payload.data(), enc->payload.size()})
                   .ok());
  p.routing.positions = 2;
  p.routing.experts.push_back({0, 6, std::vector<int32_t>(11, 1)});  // 2 x 6 needed
  enc = encode_reply(reply{p});
  ASSERT_TRUE(enc.ok());
  EXPECT_FALSE(decode_reply(byte_view{enc->header.data(), enc->header.size()},
                            byte_view{enc->payload.data(), enc->payload.size()})
                   .ok());
}

}  // namespace
}  // namespace hart::protocol
