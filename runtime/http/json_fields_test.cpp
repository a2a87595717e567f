#include "runtime/http/json_fields.h"

#include <gtest/gtest.h>

namespace hart::http {
namespace {

TEST(json_fields, parse_body_refuses_bad_json_and_non_objects) {
  EXPECT_EQ(parse_body("{\"a\": ").get_status().code(), status_code::invalid_argument);
  EXPECT_NE(parse_body("[1, 2]").get_status().message().find("must be a JSON object, got array"),
            std::string::npos);
  EXPECT_TRUE(parse_body("{\"a\": 1}").ok());
}

TEST(json_fields, wrong_types_and_ranges_name_the_field) {
  const json o =
      json::parse(R"({"t": "hot", "n": 2.5, "k": -3, "b": 1, "stop": ["a", 7], "ids": [1, -2], "x": null})");
  json_fields f(o, "sampling_params.");
  float t = 1.0f;
  status s = f.get("t", &t);
  EXPECT_EQ(s.message(), "sampling_params.t: expected a number, got string");
  int64_t v = 0;
  EXPECT_NE(f.get_int("n", 0, 10, &v).message().find("sampling_params.n: 2.5"), std::string::npos);
  EXPECT_NE(f.get_int("k", -1, 10, &v).message().find("sampling_params.k: -3"), std::string::npos);
  bool b = false;
  EXPECT_EQ(f.get("b", &b).message(), "sampling_params.b: expected a boolean, got number");
  std::vector<std::string> stop;
  EXPECT_EQ(f.get_strings("stop", &stop).message(), "sampling_params.stop[1]: expected a string, got number");
  std::vector<uint32_t> ids;
  EXPECT_NE(f.get_token_ids("ids", &ids).message().find("sampling_params.ids[1]"), std::string::npos);
  // Absent and null keep the default.
  t = 0.5f;
  EXPECT_TRUE(f.get("x", &t).ok());
  EXPECT_TRUE(f.get("missing", &t).ok());
  EXPECT_EQ(t, 0.5f);
  EXPECT_EQ(f.only({"t", "n", "k", "b", "stop", "ids"}).message(), "sampling_params.x: unknown field");
}

TEST(json_fields, strings_take_one_or_a_list_and_ints_take_integral_floats) {
  const json o = json::parse(R"({"one": "x", "two": ["a", "b"], "n": 3.0, "big": 5000000000})");
  json_fields f(o);
  std::vector<std::string> s;
  ASSERT_TRUE(f.get_strings("one", &s).ok());
  EXPECT_EQ(s, std::vector<std::string>{"x"});
  ASSERT_TRUE(f.get_strings("two", &s).ok());
  EXPECT_EQ(s.size(), 2u);
  int64_t v = 0;
  ASSERT_TRUE(f.get_int("n", 1, 10, &v).ok());
  EXPECT_EQ(v, 3);
  EXPECT_FALSE(f.get_int("big", 0, INT32_MAX, &v).ok());
}

TEST(json_fields, unsupported_allows_only_off_values) {
  const json o = json::parse(R"({"a": [], "b": 0, "c": false, "d": [{"type": "function"}], "e": 0.5})");
  json_fields f(o);
  EXPECT_TRUE(f.unsupported("a", "x").ok());
  EXPECT_TRUE(f.unsupported("b", "x").ok());
  EXPECT_TRUE(f.unsupported("c", "x").ok());
  EXPECT_EQ(f.unsupported("d", "tool calling").message(), "d: tool calling is not supported by this server");
  EXPECT_FALSE(f.unsupported("e", "x").ok());
}

TEST(json_fields, json_text_replaces_invalid_utf8) {
  json j = std::string("a\xE4");
  EXPECT_EQ(json_text(j), "\"a\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace hart::http
