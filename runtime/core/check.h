// File: runtime/core/check.h
// HART_CHECK(cond) << "context"; aborts in every build with file, line and
// function when an internal invariant breaks (style R26). Never for user input.
#pragma once

#include <sstream>

namespace hart::detail {

class check_failure {
 public:
  check_failure(const char* cond, const char* file, int line, const char* func)
      : cond_(cond), file_(file), line_(line), func_(func) {}
  [[noreturn]] ~check_failure();
  template <typename T>
  check_failure& operator<<(const T& v) {
    msg_ << v;
    return *this;
  }

 private:
  const char* cond_;
  const char* file_;
  int line_;
  const char* func_;
  std::ostringstream msg_;
};

}  // namespace hart::detail

#define HART_CHECK(cond) \
  if (cond) {            \
  } else                 \
    ::hart::detail::check_failure(#cond, __FILE__, __LINE__, __func__)

#define HART_ABORT(msg) ::hart::detail::check_failure("abort", __FILE__, __LINE__, __func__) << msg
