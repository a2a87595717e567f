#include "runtime/sched/stop_rules.h"

#include <gtest/gtest.h>

namespace hart::sched {
namespace {

class stop_rules_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tokenizer::load(std::string(HART_TEST_DATA) + "/tiny-a/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.get_status().to_string();
    tok_ = std::make_unique<tokenizer>(std::move(t).value());
  }
  int32_t id(const char* piece) {
    auto i = tok_->token_id(piece);
    EXPECT_TRUE(i.has_value()) << piece;
    return i.value_or(0);
  }
  std::unique_ptr<tokenizer> tok_;
};

TEST_F(stop_rules_test, stop_string_split_across_tokens_is_held_back_and_not_emitted) {
  gen_request r;
  r.max_new_tokens = 100;
  r.stop = {"top"};
  stop_rules s(r, tok_.get(), 1);
  std::string out;
  stop_outcome o = s.push(id("a"));
  EXPECT_EQ(o.text, "a");
  o = s.push(id("t"));
  EXPECT_EQ(o.text, "") << "t could start the stop string";
  o = s.push(id("o"));
  EXPECT_EQ(o.text, "");
  EXPECT_FALSE(o.done);
  o = s.push(id("p"));
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.reason, finish_reason::stop);
  EXPECT_EQ(o.text, "") << "the stop string is never emitted";
}

TEST_F(stop_rules_test, false_start_is_released_with_the_next_token) {
  gen_request r;
  r.max_new_tokens = 100;
  r.stop = {"top", "xy"};
  stop_rules s(r, tok_.get(), 1);
  EXPECT_EQ(s.push(id("t")).text, "");
  EXPECT_EQ(s.push(id("o")).text, "");
  stop_outcome o = s.push(id("a"));
  EXPECT_EQ(o.text, "toa");
  EXPECT_FALSE(o.done);
  EXPECT_EQ(s.push(id("x")).text, "");
  EXPECT_EQ(s.release(), "x") << "abort releases what was held back";
}

TEST_F(stop_rules_test, text_before_the_stop_string_in_the_same_token_is_emitted) {
  gen_request r;
  r.max_new_tokens = 100;
  r.stop = {"b"};
  stop_rules s(r, tok_.get(), 1);
  EXPECT_EQ(s.push(id("a")).text, "a");
  std::vector<int32_t> ids = tok_->encode("cbd").value();
  stop_outcome o;
  std::string text;
  for (int32_t t : ids) {
    o = s.push(t);
    text += o.text;
    if (o.done) break;
  }
  EXPECT_TRUE(o.done);
  EXPECT_EQ(text, "c");
}

TEST_F(stop_rules_test, min_new_tokens_ignores_eos_stop_ids_and_strings) {
  gen_request r;
  r.max_new_tokens = 10;
  r.min_new_tokens = 4;
  r.stop = {"a"};
  r.stop_token_ids = {id("z")};
  stop_rules s(r, tok_.get(), 1);
  EXPECT_FALSE(s.push(1).done) << "EOS before min_new_tokens";
  stop_outcome o = s.push(id("a"));
  EXPECT_FALSE(o.done) << "stop string before min_new_tokens";
  EXPECT_EQ(o.text, "a");
  EXPECT_FALSE(s.push(id("z")).done) << "stop id before min_new_tokens";
  o = s.push(1);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.reason, finish_reason::stop);
}

TEST_F(stop_rules_test, stop_token_id_and_eos_and_ignore_eos) {
  gen_request r;
  r.max_new_tokens = 10;
  r.stop_token_ids = {id("q")};
  stop_rules s(r, tok_.get(), 1);
  stop_outcome o = s.push(id("q"));
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.text, "");
  r.stop_token_ids.clear();
  r.ignore_eos = true;
  stop_rules t(r, tok_.get(), 1);
  EXPECT_FALSE(t.push(1).done);
}

TEST_F(stop_rules_test, max_new_tokens_ends_with_length_and_flushes) {
  gen_request r;
  r.max_new_tokens = 2;
  r.stop = {"ab"};
  stop_rules s(r, tok_.get(), 1);
  EXPECT_EQ(s.push(id("x")).text, "x");
  stop_outcome o = s.push(id("a"));
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.reason, finish_reason::length);
  EXPECT_EQ(o.text, "a") << "held-back text is released at the length limit";
}

}  // namespace
}  // namespace hart::sched
