// chat_sessions on tiny-a's tokenizer: a turn that extends the last one by its answer and new
// messages continues from the remembered ids (prompt, answer, the end-of-sentence marker the
// template writes after an answer); anything else is not a continuation; answers that ended on
// a stop string are not remembered; the least recently used session goes first, past a count
// or a token bound.
#include "actors/chat_sessions.h"

#include "runtime/text/chat_template.h"

#include <gtest/gtest.h>

namespace hart::actors {
namespace {

class chat_sessions_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = tokenizer::load(std::string(HART_TEST_DATA) + "/tiny-a/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.get_status().to_string();
    tok_ = new tokenizer(std::move(*t));
  }
  static void TearDownTestSuite() { delete tok_; }

  static std::vector<int32_t> encode(const std::string& s) {
    auto ids = tok_->encode(s);
    EXPECT_TRUE(ids.ok());
    return *ids;
  }
  static std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  static tokenizer* tok_;
};
tokenizer* chat_sessions_test::tok_ = nullptr;

using msgs = std::vector<protocol::chat_message>;

TEST_F(chat_sessions_test, a_turn_that_extends_the_last_continues_from_its_ids) {
  chat_sessions s(tok_, 8, 1000);
  const msgs turn1 = {{"system", "be brief"}, {"user", "hi"}};
  const std::vector<int32_t> prompt = {0, 11, 12, 13}, answer = {40, 41, 42};
  const std::vector<int32_t> eos = encode(std::string(chat_tokens::eos));
  ASSERT_EQ(eos.size(), 1u);
  // DeepSeek-V4's chat mode, as the gateway renders messages.
  const std::vector<int32_t> tail =
      encode(std::string(chat_tokens::user) + "more" + std::string(chat_tokens::assistant) +
             std::string(chat_tokens::think_end));
  // Cut by max_new_tokens: the template's end-of-sentence marker follows the answer.
  s.remember("a", turn1, prompt, answer, "xyz", sched::finish_reason::length);
  msgs turn2 = turn1;
  turn2.push_back({"assistant", "xyz"});
  turn2.push_back({"user", "more"});
  auto c = s.continuation("a", turn2);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ(**c, cat(cat(cat(prompt, answer), eos), tail));
  // Ended on the marker itself: not written twice.
  s.remember("b", turn1, prompt, cat(answer, eos), "xyz", sched::finish_reason::stop);
  c = s.continuation("b", turn2);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ(**c, cat(cat(cat(prompt, answer), eos), tail));
}

TEST_F(chat_sessions_test, anything_else_is_not_a_continuation) {
  chat_sessions s(tok_, 8, 1000);
  const msgs turn1 = {{"user", "hi"}};
  s.remember("a", turn1, {0, 11}, {40, 41}, "xy", sched::finish_reason::length);
  auto none = [&](const std::string& id, const msgs& m) {
    auto c = s.continuation(id, m);
    return c.ok() && !c->has_value();
  };
  EXPECT_TRUE(none("zz", {{"user", "hi"}, {"assistant", "xy"}, {"user", "more"}})) << "unknown session";
  EXPECT_TRUE(none("a", {{"user", "hi"}, {"assistant", "edited"}, {"user", "more"}})) << "another answer";
  EXPECT_TRUE(none("a", {{"user", "hello"}, {"assistant", "xy"}, {"user", "more"}})) << "another history";
  EXPECT_TRUE(none("a", {{"user", "hi"}, {"assistant", "xy"}})) << "nothing new";
  EXPECT_TRUE(none("a", {{"user", "hi"}, {"user", "xy"}, {"user", "more"}})) << "no answer in between";
  auto bad = s.continuation("a", {{"user", "hi"}, {"assistant", "xy"}, {"wizard", "more"}});
  EXPECT_EQ(bad.get_status().code(), status_code::invalid_argument);
  // A stop string ended it: its ids hold the stop string, its text does not: not remembered.
  s.remember("a", turn1, {0, 11}, {40, 41}, "xy", sched::finish_reason::stop);
  EXPECT_TRUE(none("a", {{"user", "hi"}, {"assistant", "xy"}, {"user", "more"}}));
  s.remember("a", turn1, {0, 11}, {40, 41}, "xy", sched::finish_reason::abort);
  EXPECT_TRUE(none("a", {{"user", "hi"}, {"assistant", "xy"}, {"user", "more"}}));
  EXPECT_EQ(s.size(), 0u);
}

TEST_F(chat_sessions_test, the_least_recently_used_session_goes_first) {
  chat_sessions s(tok_, 2, 1000);
  const msgs turn1 = {{"user", "hi"}};
  const msgs turn2 = {{"user", "hi"}, {"assistant", "xy"}, {"user", "more"}};
  s.remember("a", turn1, {0}, {40}, "xy", sched::finish_reason::length);
  s.remember("b", turn1, {0}, {40}, "xy", sched::finish_reason::length);
  ASSERT_TRUE(s.continuation("a", turn2)->has_value());  // a is now the most recent
  s.remember("c", turn1, {0}, {40}, "xy", sched::finish_reason::length);
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.continuation("a", turn2)->has_value());
  EXPECT_FALSE(s.continuation("b", turn2)->has_value());
  EXPECT_TRUE(s.continuation("c", turn2)->has_value());
  // The token bound: each turn holds 1 prompt + 1 answer + 1 marker id; 7 tokens keep two.
  chat_sessions t(tok_, 100, 7);
  for (const char* id : {"a", "b", "c"}) t.remember(id, turn1, {0}, {40}, "xy", sched::finish_reason::length);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.tokens(), 6u);
  EXPECT_FALSE(t.continuation("a", turn2)->has_value());
  t.remember("big", turn1, std::vector<int32_t>(8, 0), {40}, "xy",
             sched::finish_reason::length);  // over the bound alone
  EXPECT_FALSE(t.continuation("big", turn2)->has_value());
  EXPECT_EQ(t.tokens(), 6u);
}

}  // namespace
}  // namespace hart::actors
