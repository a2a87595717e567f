#include "runtime/core/status.h"

#include "runtime/core/check.h"
#include "runtime/core/status_testing.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace hart {
namespace {

TEST(status, default_is_ok) {
  status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), status_code::ok);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(status::ok_status().ok());
}

TEST(status, printf_constructors_set_code_and_message) {
  struct row {
    status s;
    status_code code;
    const char* name;
  };
  const row rows[] = {
      {invalid_argument("x=%d", 1), status_code::invalid_argument, "invalid_argument"},
      {out_of_range("x=%d", 1), status_code::out_of_range, "out_of_range"},
      {not_found("x=%d", 1), status_code::not_found, "not_found"},
      {resource_exhausted("x=%d", 1), status_code::resource_exhausted, "resource_exhausted"},
      {failed_precondition("x=%d", 1), status_code::failed_precondition, "failed_precondition"},
      {internal_error("x=%d", 1), status_code::internal, "internal"},
      {data_loss("x=%d", 1), status_code::data_loss, "data_loss"},
      {unimplemented("x=%d", 1), status_code::unimplemented, "unimplemented"},
  };
  for (const row& r : rows) {
    EXPECT_FALSE(r.s.ok()) << r.name;
    EXPECT_EQ(r.s.code(), r.code) << r.name;
    EXPECT_EQ(r.s.message(), "x=1") << r.name;
    EXPECT_STREQ(status_code_name(r.code), r.name);
    EXPECT_EQ(r.s.to_string(), std::string(r.name) + ": x=1");
  }
  EXPECT_STREQ(status_code_name(status_code::ok), "ok");
  EXPECT_STREQ(status_code_name(status_code::unavailable), "unavailable");
  EXPECT_STREQ(status_code_name(status_code::cancelled), "cancelled");
}

TEST(status, long_and_empty_messages) {
  const std::string big(5000, 'a');
  status s = invalid_argument("%s|%lld", big.c_str(), static_cast<long long>(1) << 40);
  EXPECT_EQ(s.message(), big + "|1099511627776");
  status e = internal_error("%s", "");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.message(), "");
}

status fail_if(bool fail) {
  return fail ? out_of_range("index %d", 7) : status();
}

status two_steps(bool fail_first, int* reached) {
  HART_RETURN_IF_ERROR(fail_if(fail_first));
  *reached = 1;
  HART_RETURN_IF_ERROR(fail_if(false));
  *reached = 2;
  return {};
}

TEST(status, return_if_error) {
  int reached = 0;
  status s = two_steps(true, &reached);
  EXPECT_EQ(s.code(), status_code::out_of_range);
  EXPECT_EQ(s.message(), "index 7");
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(two_steps(false, &reached).ok());
  EXPECT_EQ(reached, 2);
}

status_or<std::unique_ptr<int>> make_ptr(int v) {
  if (v < 0) return invalid_argument("v=%d < 0", v);
  return std::make_unique<int>(v);
}

status_or<int> double_it(int v) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<int> p, make_ptr(v));
  return *p * 2;
}

TEST(status_or, value_and_error) {
  status_or<int> ok_value = 5;
  ASSERT_TRUE(ok_value.ok());
  EXPECT_EQ(ok_value.value(), 5);
  EXPECT_EQ(*ok_value, 5);
  EXPECT_TRUE(ok_value.get_status().ok());

  status_or<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);

  status_or<int> err = not_found("tensor %s", "w");
  EXPECT_FALSE(err.ok());
  EXPECT_EQ(err.get_status().code(), status_code::not_found);
  EXPECT_EQ(err.get_status().message(), "tensor w");
}

TEST(status_or, move_only_and_assign_or_return) {
  status_or<std::unique_ptr<int>> p = make_ptr(3);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> owned = std::move(p).value();
  EXPECT_EQ(*owned, 3);

  status_or<int> d = double_it(21);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value(), 42);
  status_or<int> bad = double_it(-1);
  EXPECT_EQ(bad.get_status().code(), status_code::invalid_argument);
  EXPECT_EQ(bad.get_status().message(), "v=-1 < 0");
}

// EXPECT_STATUS: the code and a piece of the message, for status and status_or; a wrong code,
// a message without the text, or ok fails with the whole message printed.
TEST(status, expect_status_checks_code_and_message) {
  EXPECT_STATUS(invalid_argument("dim=%d", 0), status_code::invalid_argument, "dim=0");
  EXPECT_STATUS(status_or<int>(not_found("no config.json in %s", "/x")), status_code::not_found,
                "config.json");
  EXPECT_STATUS(status{}, status_code::ok, "");
  EXPECT_NONFATAL_FAILURE(EXPECT_STATUS(invalid_argument("dim=0"), status_code::out_of_range, "dim=0"),
                          "is invalid_argument: dim=0");
  EXPECT_NONFATAL_FAILURE(EXPECT_STATUS(invalid_argument("dim=0"), status_code::invalid_argument, "dim=1"),
                          "naming \"dim=1\"");
  EXPECT_NONFATAL_FAILURE(EXPECT_STATUS(status_or<int>(7), status_code::invalid_argument, ""), "is ok");
}

// The other error channel (R26): broken invariants abort with location and message.
TEST(check_death_test, check_aborts_with_message) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int x = 3;
  HART_CHECK(x == 3) << "never printed";
  EXPECT_DEATH({ HART_CHECK(x == 4) << "x was " << x; }, "check failed: x == 4 x was 3");
  EXPECT_DEATH({ HART_ABORT("boom " << 1); }, "boom 1");
}

}  // namespace
}  // namespace hart
