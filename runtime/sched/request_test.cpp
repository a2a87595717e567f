// gen_request::validate: the one place a request's values are checked, by the gateway
// before it accepts a request and by scheduler::submit again.
#include "runtime/sched/request.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hart::sched {
namespace {

gen_request valid() {
  gen_request r;
  r.id = 7;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 4;
  return r;
}

TEST(gen_request, validate_refuses_each_bad_value_naming_it) {
  const struct {
    const char* name;
    void (*mutate)(gen_request&);
    status_code code;
    const char* needle;
  } cases[] = {
      {"empty prompt", [](gen_request& r) { r.prompt.clear(); }, status_code::invalid_argument,
       "empty prompt"},
      {"token over vocab", [](gen_request& r) { r.prompt.push_back(100); }, status_code::invalid_argument,
       "prompt token 100"},
      {"negative token", [](gen_request& r) { r.prompt.push_back(-1); }, status_code::invalid_argument,
       "prompt token -1"},
      {"stop id over vocab", [](gen_request& r) { r.stop_token_ids = {100}; }, status_code::invalid_argument,
       "stop token 100"},
      {"empty stop", [](gen_request& r) { r.stop = {""}; }, status_code::invalid_argument,
       "empty stop string"},
      {"max_new_tokens -1", [](gen_request& r) { r.max_new_tokens = -1; }, status_code::invalid_argument,
       "max_new_tokens"},
      {"logprob_start past the prompt", [](gen_request& r) { r.logprob_start = int64_t(r.prompt.size()); },
       status_code::invalid_argument, "logprob_start"},
      {"logprob_start -2", [](gen_request& r) { r.logprob_start = -2; }, status_code::invalid_argument,
       "logprob_start"},
      {"min over max", [](gen_request& r) { r.min_new_tokens = 5; }, status_code::invalid_argument,
       "min_new_tokens"},
      {"n 0", [](gen_request& r) { r.n = 0; }, status_code::invalid_argument, "n 0"},
      {"n over max", [](gen_request& r) { r.n = max_samples + 1; }, status_code::invalid_argument, "n 65"},
      {"top_logprobs", [](gen_request& r) { r.top_logprobs = 21; }, status_code::invalid_argument,
       "top_logprobs"},
      {"deadline", [](gen_request& r) { r.deadline_us = -1; }, status_code::invalid_argument, "deadline_us"},
      {"temperature NaN", [](gen_request& r) { r.temperature = std::nanf(""); },
       status_code::invalid_argument, "temperature"},
      {"top_p 0", [](gen_request& r) { r.top_p = 0.0f; }, status_code::invalid_argument, "top_p"},
      {"min_p NaN", [](gen_request& r) { r.min_p = std::nanf(""); }, status_code::invalid_argument, "min_p"},
      {"top_k < 0", [](gen_request& r) { r.top_k = -1; }, status_code::invalid_argument, "top_k"},
  };
  ASSERT_TRUE(valid().validate(100).ok());
  for (const auto& c : cases) {
    gen_request r = valid();
    c.mutate(r);
    const status s = r.validate(100);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.name << ": " << s.message();
  }
}

TEST(gen_request, validate_refuses_a_prompt_that_leaves_no_room_under_max_context) {
  gen_request r = valid();
  EXPECT_TRUE(r.validate(100, 4).ok()) << "3 prompt tokens leave one position under 4";
  EXPECT_TRUE(r.validate(100, 0).ok()) << "0: no limit";
  const status s = r.validate(100, 3);
  EXPECT_EQ(s.code(), status_code::out_of_range) << s.to_string();
  EXPECT_NE(s.message().find("max_context 3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hart::sched
