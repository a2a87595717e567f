// rollout_client against a real `hart serve` process on 127.0.0.1 (tiny-a,
// deterministic): n samples with log-probs and versions, a batch in flight at
// once equal to the same prompts one by one, abort keeping partial output,
// pause / resume, a weight push mid-generation re-tagging later tokens, and
// typed errors for bad prompts.
#include "rollout/rollout_client.h"

#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"
#include "runtime/core/status_testing.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hart {
namespace {

using namespace std::chrono_literals;
using testing::server_process;

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

rollout_prompt make_prompt(std::vector<uint32_t> ids, uint32_t n, uint32_t max_new, uint64_t seed) {
  rollout_prompt p;
  p.token_ids = std::move(ids);
  p.sampling.n = n;
  p.sampling.max_new_tokens = max_new;
  p.sampling.ignore_eos = true;
  p.sampling.has_seed = true;
  p.sampling.seed = seed;
  return p;
}

std::unique_ptr<rollout_client> connect(const server_process& srv, uint32_t max_in_flight = 256) {
  rollout_client_params p;
  p.endpoint = srv.endpoint();
  p.timeout = 60s;
  p.max_in_flight = max_in_flight;
  auto c = rollout_client::connect(p);
  EXPECT_TRUE(c.ok()) << c.get_status().to_string();
  return std::move(*c);
}

TEST(RolloutClient, SamplesCarryLogprobsVersionsAndFinishReasons) {
  server_process srv(k_tiny_a, {});
  ASSERT_FALSE(srv.endpoint().empty());
  auto rc = connect(srv);
  auto r = rc->generate({make_prompt({0, 2, 40, 41}, 4, 6, 1), make_prompt({0, 2, 50}, 3, 5, 2)});
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  ASSERT_EQ(r->groups.size(), 2u);
  ASSERT_EQ(r->groups[0].samples.size(), 4u);
  ASSERT_EQ(r->groups[1].samples.size(), 3u);
  EXPECT_EQ(r->n_tokens, 4 * 6 + 3 * 5);
  for (size_t g = 0; g < 2; ++g) {
    for (const rollout_sample& s : r->groups[g].samples) {
      EXPECT_EQ(s.token_ids.size(), g == 0 ? 6u : 5u);
      EXPECT_EQ(s.finish, protocol::finish_reason::length);
      ASSERT_EQ(s.logprobs.size(), s.token_ids.size());
      ASSERT_EQ(s.weight_versions.size(), s.token_ids.size());
      for (float lp : s.logprobs) EXPECT_TRUE(std::isfinite(lp) && lp <= 0.0f) << lp;
      for (uint64_t v : s.weight_versions) EXPECT_EQ(v, 0u);
    }
  }
  // Samples of one prompt use seeds seed, seed+1, ...: distinct streams.
  EXPECT_NE(r->groups[0].samples[0].token_ids, r->groups[0].samples[1].token_ids);
}

// Many requests over one connection (all at once, or two at a time) give the
// same samples as each prompt alone: replies are routed by request id.
TEST(RolloutClient, ConcurrentBatchEqualsOneByOne) {
  server_process srv(k_tiny_a, {});
  ASSERT_FALSE(srv.endpoint().empty());
  std::vector<rollout_prompt> prompts;
  for (uint32_t i = 0; i < 8; ++i)
    prompts.push_back(make_prompt({0, 2, 30 + i, 60 + 2 * i}, 2, 5 + i % 3, 100 + i));
  auto all = connect(srv)->generate(prompts);
  ASSERT_TRUE(all.ok()) << all.get_status().to_string();
  auto two = connect(srv, 2)->generate(prompts);
  ASSERT_TRUE(two.ok()) << two.get_status().to_string();
  auto one_rc = connect(srv);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = one_rc->generate({prompts[i]});
    ASSERT_TRUE(alone.ok()) << alone.get_status().to_string();
    for (size_t s = 0; s < 2; ++s) {
      EXPECT_EQ(all->groups[i].samples[s].token_ids, alone->groups[0].samples[s].token_ids) << i << "/" << s;
      EXPECT_EQ(two->groups[i].samples[s].token_ids, alone->groups[0].samples[s].token_ids) << i << "/" << s;
      EXPECT_EQ(all->groups[i].samples[s].logprobs, alone->groups[0].samples[s].logprobs) << i << "/" << s;
    }
  }
}

TEST(RolloutClient, AbortKeepsPartialOutput) {
  server_process srv(k_tiny_a, {});
  ASSERT_FALSE(srv.endpoint().empty());
  auto rc = connect(srv, 1);
  // Prompt 1 waits in the client (max_in_flight 1) and ends without tokens.
  auto id = rc->submit({make_prompt({0, 2, 40}, 2, 4000, 1), make_prompt({0, 2, 41}, 1, 4000, 2)});
  ASSERT_TRUE(id.ok()) << id.get_status().to_string();
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(rc->poll(50ms).ok());
    if (rc->progress(*id)->n_tokens >= 4) break;
  }
  ASSERT_GE(rc->progress(*id)->n_tokens, 4);
  ASSERT_TRUE(rc->abort(*id).ok());
  auto r = rc->wait(*id);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  for (const rollout_sample& s : r->groups[0].samples) {
    EXPECT_EQ(s.finish, protocol::finish_reason::abort);
    EXPECT_LT(s.token_ids.size(), 4000u);
    EXPECT_EQ(s.logprobs.size(), s.token_ids.size());
  }
  EXPECT_GT(r->groups[0].samples[0].token_ids.size() + r->groups[0].samples[1].token_ids.size(), 0u);
  EXPECT_EQ(r->groups[1].samples[0].finish, protocol::finish_reason::abort);
  EXPECT_TRUE(r->groups[1].samples[0].token_ids.empty());
  // The connection stays usable after the abort.
  auto after = rc->generate({make_prompt({0, 2, 42}, 1, 3, 3)});
  ASSERT_TRUE(after.ok()) << after.get_status().to_string();
  EXPECT_EQ(after->groups[0].samples[0].token_ids.size(), 3u);
}

TEST(RolloutClient, PauseHoldsTokensUntilResume) {
  server_process srv(k_tiny_a, {});
  ASSERT_FALSE(srv.endpoint().empty());
  auto rc = connect(srv);
  ASSERT_TRUE(rc->pause(protocol::pause_mode::in_place).ok());
  auto id = rc->submit({make_prompt({0, 2, 40}, 1, 5, 1)});
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(rc->poll(300ms).ok());
  EXPECT_EQ(rc->progress(*id)->n_tokens, 0);
  ASSERT_TRUE(rc->resume().ok());
  auto r = rc->wait(*id);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->groups[0].samples[0].token_ids.size(), 5u);
}

// A weight push while a sample decodes: its tokens switch from version 0 to 7
// and never back.
TEST(RolloutClient, TokensCarryTheVersionThatProducedThem) {
  server_process srv(k_tiny_a, {"--weight-sync-endpoint", "tcp://127.0.0.1:*"});
  ASSERT_FALSE(srv.endpoint().empty());
  ASSERT_FALSE(srv.weight_sync_endpoint().empty());
  auto rc = connect(srv);
  auto id = rc->submit({make_prompt({0, 2, 40}, 1, 4000, 1)});
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 600 && rc->progress(*id)->n_tokens < 2; ++i) ASSERT_TRUE(rc->poll(50ms).ok());
  auto ckpt = checkpoint_tensors_open(k_tiny_a);
  ASSERT_TRUE(ckpt.ok());
  auto ws = weight_sync_client::connect({srv.weight_sync_endpoint()});
  ASSERT_TRUE(ws.ok());
  auto pushed = ws.value()->push(7, ckpt->tensors);
  ASSERT_TRUE(pushed.ok()) << pushed.get_status().to_string();
  for (int i = 0; i < 600 && rc->progress(*id)->last_version != 7; ++i) ASSERT_TRUE(rc->poll(50ms).ok());
  ASSERT_TRUE(rc->abort(*id).ok());
  auto r = rc->wait(*id);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const std::vector<uint64_t>& v = r->groups[0].samples[0].weight_versions;
  ASSERT_GE(v.size(), 3u);
  EXPECT_EQ(v.front(), 0u);
  EXPECT_EQ(v.back(), 7u);
  for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i - 1], v[i]) << i;
  auto now = rc->weight_version();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, 7u);
}

TEST(RolloutClient, BadPromptsAreTypedErrors) {
  server_process srv(k_tiny_a, {});
  ASSERT_FALSE(srv.endpoint().empty());
  auto rc = connect(srv);
  EXPECT_EQ(rc->submit({}).get_status().code(), status_code::invalid_argument);
  auto empty = rc->submit({make_prompt({}, 1, 4, 1)});
  EXPECT_STATUS(empty, status_code::invalid_argument, "prompt 0");
  EXPECT_EQ(rc->submit({make_prompt({0, 2}, 0, 4, 1)}).get_status().code(), status_code::invalid_argument);
  EXPECT_EQ(rc->wait(12345).get_status().code(), status_code::not_found);
  // Token 100000 is outside tiny-a's 512-entry vocabulary: the server refuses
  // prompt 1, prompt 0 still completes, and wait reports the refusal.
  auto r = rc->generate({make_prompt({0, 2, 3}, 1, 3, 1), make_prompt({0, 100000}, 2, 3, 1)});
  EXPECT_STATUS(r, status_code::out_of_range, "prompt 1");
  EXPECT_FALSE(rollout_client::connect({""}).ok());
}

}  // namespace
}  // namespace hart
