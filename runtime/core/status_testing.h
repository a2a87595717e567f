// File: runtime/core/status_testing.h — for tests only (GoogleTest): one line
// per error case,
//
//   EXPECT_STATUS(rms_norm_cpu(p), status_code::invalid_argument, "dim=0");
//   ASSERT_STATUS(model_config_load(dir), status_code::not_found, "config.json");
//
// passes when the status (or a status_or's) has that code and its message
// contains the text (the request, field or value the error must name); on
// failure it prints the expression, the code and the whole message.
#pragma once

#include "runtime/core/status.h"

#include <gtest/gtest.h>

#include <string>

namespace hart::testing {

inline const status& status_of(const status& s) {
  return s;
}
template <typename T>
const status& status_of(const status_or<T>& s) {
  return s.get_status();
}

template <typename S>
::testing::AssertionResult status_is(const char* expr, const char*, const char*, const S& got,
                                     status_code code, const std::string& text) {
  const status& s = status_of(got);
  if (s.code() == code && s.message().find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " is " << s.to_string() << "\n  want "
                                       << status_code_name(code) << " naming \"" << text << "\"";
}

}  // namespace hart::testing

#define EXPECT_STATUS(expr, code, text) EXPECT_PRED_FORMAT3(::hart::testing::status_is, expr, code, text)
#define ASSERT_STATUS(expr, code, text) ASSERT_PRED_FORMAT3(::hart::testing::status_is, expr, code, text)
