#include "runtime/core/status.h"

#include <cstdarg>
#include <cstdio>

namespace hart {

const char* status_code_name(status_code c) {
  switch (c) {
    case status_code::ok:
      return "ok";
    case status_code::invalid_argument:
      return "invalid_argument";
    case status_code::out_of_range:
      return "out_of_range";
    case status_code::not_found:
      return "not_found";
    case status_code::resource_exhausted:
      return "resource_exhausted";
    case status_code::failed_precondition:
      return "failed_precondition";
    case status_code::unavailable:
      return "unavailable";
    case status_code::internal:
      return "internal";
    case status_code::cancelled:
      return "cancelled";
    case status_code::data_loss:
      return "data_loss";
    case status_code::unimplemented:
      return "unimplemented";
  }
  return "unknown";
}

std::string status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

namespace {
std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string s(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}
}  // namespace

#define HART_DEFINE_STATUS_CTOR(fn, code) \
  status fn(const char* fmt, ...) {       \
    va_list ap;                           \
    va_start(ap, fmt);                    \
    std::string msg = vformat(fmt, ap);   \
    va_end(ap);                           \
    return status(code, std::move(msg));  \
  }

HART_DEFINE_STATUS_CTOR(invalid_argument, status_code::invalid_argument)
HART_DEFINE_STATUS_CTOR(out_of_range, status_code::out_of_range)
HART_DEFINE_STATUS_CTOR(not_found, status_code::not_found)
HART_DEFINE_STATUS_CTOR(resource_exhausted, status_code::resource_exhausted)
HART_DEFINE_STATUS_CTOR(failed_precondition, status_code::failed_precondition)
HART_DEFINE_STATUS_CTOR(internal_error, status_code::internal)
HART_DEFINE_STATUS_CTOR(data_loss, status_code::data_loss)
HART_DEFINE_STATUS_CTOR(unimplemented, status_code::unimplemented)
HART_DEFINE_STATUS_CTOR(unavailable, status_code::unavailable)

}  // namespace hart
