// File: runtime/text/chat_template_test.cpp
#include "runtime/text/chat_template.h"

#include "runtime/core/status_testing.h"
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace hart {
namespace {

const std::vector<chat_message> k_conversation = {
    {"system", "You are terse."},
    {"user", "2+2?"},
    {"assistant", "4"},
    {"user", "中文呢？"},
};

TEST(chat_encode, multi_turn_matches_tokenizer_config_template) {
  status_or<std::string> s = chat_encode(k_conversation, chat_options{});
  ASSERT_TRUE(s.ok()) << s.get_status().to_string();
  EXPECT_EQ(*s,
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>2+2?<｜Assistant｜>4"
            "<｜end▁of▁sentence｜><｜User｜>中文呢？<｜Assistant｜>");
}

TEST(chat_encode, generation_prompt_and_thinking) {
  std::vector<chat_message> one = {{"user", "hi"}};
  chat_options opt;
  opt.add_generation_prompt = false;
  EXPECT_EQ(chat_encode(one, opt).value(), "<｜begin▁of▁sentence｜><｜User｜>hi");
  opt.add_generation_prompt = true;
  opt.thinking = thinking_mode::think;
  EXPECT_EQ(chat_encode(one, opt).value(), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
  opt.thinking = thinking_mode::no_think;
  EXPECT_EQ(chat_encode(one, opt).value(), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  opt.bos_token = "";
  EXPECT_EQ(chat_encode({}, opt).value(), "<｜Assistant｜></think>");
}

// DeepSeek-V4's encoding (encoding_dsv4.py): the marker after every "<｜Assistant｜>" a user turn
// ends with, earlier reasoning dropped in thinking mode, the "max" effort's instruction first.
TEST(chat_encode, deepseek_v4_chat_and_thinking_modes) {
  chat_options opt;
  opt.thinking = thinking_mode::no_think;
  std::vector<chat_message> conv = k_conversation;
  conv[2].reasoning = "two and two";
  EXPECT_EQ(chat_encode(conv, opt).value(),
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>2+2?<｜Assistant｜></think>4"
            "<｜end▁of▁sentence｜><｜User｜>中文呢？<｜Assistant｜></think>");
  opt.thinking = thinking_mode::think;
  EXPECT_EQ(chat_encode(conv, opt).value(),
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>2+2?<｜Assistant｜></think>4"
            "<｜end▁of▁sentence｜><｜User｜>中文呢？<｜Assistant｜><think>");
  // An answer after the last user turn keeps its reasoning (the reference's golden test 2).
  const std::vector<chat_message> kept = {{"user", "Hello"},
                                          {"assistant", "Hi there!"},
                                          {"user", "Capital of France?"},
                                          {"assistant", "Paris.", "The user asks."}};
  EXPECT_EQ(
      chat_encode(kept, opt).value(),
      "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>Hi there!<｜end▁of▁sentence｜>"
      "<｜User｜>Capital of France?<｜Assistant｜><think>The user asks.</think>Paris.<｜end▁of▁sentence｜>"
      "<｜Assistant｜><think>");
  opt.reasoning_effort_max = true;
  EXPECT_EQ(chat_encode({{"user", "hi"}}, opt).value(), "<｜begin▁of▁sentence｜>" +
                                                            std::string(chat_tokens::reasoning_effort_max) +
                                                            "<｜User｜>hi<｜Assistant｜><think>");
  opt.thinking = thinking_mode::no_think;  // the instruction is for thinking mode only
  EXPECT_EQ(chat_encode({{"user", "hi"}}, opt).value(),
            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
}

TEST(chat_encode, errors) {
  status_or<std::string> s = chat_encode({{"user", "a"}, {"tool", "b"}}, chat_options{});
  ASSERT_STATUS(s, status_code::invalid_argument, "\"tool\"");

  chat_options opt;
  opt.add_generation_prompt = false;
  opt.thinking = thinking_mode::think;
  EXPECT_EQ(chat_encode({{"user", "a"}}, opt).get_status().code(), status_code::invalid_argument);
}

TEST(chat_encode, tokenized_special_tokens_are_single_ids) {
  status_or<tokenizer> tok = tokenizer::load(std::string(HART_TEST_DATA) + "/tiny-a/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.get_status().to_string();
  chat_options opt;
  opt.bos_token = tok->config().bos_token;
  opt.thinking = thinking_mode::think;
  std::string prompt = chat_encode(k_conversation, opt).value();
  std::vector<int32_t> ids = tok->encode(prompt).value();
  const int32_t bos = 0, eos = 1, user = 2, assistant = 3, think = 4, think_end = 5;
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(ids[ids.size() - 2], assistant);
  EXPECT_EQ(ids.back(), think);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eos), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), assistant), 2);
  // "4" sits alone between <｜Assistant｜></think> (V4: an earlier turn's thinking is dropped) and
  // <｜end▁of▁sentence｜>.
  auto it = std::find(ids.begin(), ids.end(), eos);
  ASSERT_GE(it - ids.begin(), 3);
  EXPECT_EQ(*(it - 3), assistant);
  EXPECT_EQ(*(it - 2), think_end);
  EXPECT_EQ(tok->decode({*(it - 1)}).value(), "4");
  EXPECT_EQ(tok->decode(ids).value(), prompt);
}

TEST(chat_messages_from_json, parses_and_rejects) {
  status_or<std::vector<chat_message>> m = chat_messages_from_json(
      R"([{"role": "system", "content": "s"},
          {"role": "user",
           "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].role, "system");
  EXPECT_EQ((*m)[1].content, "ab");

  for (const char* bad : {"[{\"role\": \"user\", \"content\": \"x\"}", "{}", "[1]", "[{\"content\": \"x\"}]",
                          "[{\"role\": \"user\"}]", "[{\"role\": \"user\", \"content\": 5}]",
                          "[{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]",
                          "[{\"role\": \"user\", \"content\": [{\"type\": 5, \"text\": \"x\"}]}]",
                          "[{\"role\": \"user\", \"content\": null}]", "[\"\xff\"]"}) {
    status_or<std::vector<chat_message>> r = chat_messages_from_json(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.get_status().code(), status_code::invalid_argument) << bad;
  }
  EXPECT_TRUE(chat_messages_from_json("[]").ok());
}

}  // namespace
}  // namespace hart
