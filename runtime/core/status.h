// File: runtime/core/status.h
// Recoverable errors that cross a component boundary (style R26): a small code
// set plus a message naming the problem. `status_or<T>` carries a value or the
// error. Broken invariants use HART_CHECK (check.h) instead.
//
//   status_or<model_config> cfg = model_config_load(dir);
//   if (!cfg.ok()) return cfg.status();
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace hart {

enum class status_code {
  ok,
  invalid_argument,
  out_of_range,
  not_found,
  resource_exhausted,
  failed_precondition,
  unavailable,
  internal,
  cancelled,
  data_loss,
  unimplemented,
};

const char* status_code_name(status_code c);

class [[nodiscard]] status {
 public:
  status() = default;
  status(status_code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == status_code::ok; }
  status_code code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid_argument: weight x has shape [2,3], expected [3,2]"
  std::string to_string() const;

  static status ok_status() { return {}; }

 private:
  status_code code_ = status_code::ok;
  std::string message_;
};

// printf-style constructors, one per code; the message names the offending field.
status invalid_argument(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status out_of_range(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status not_found(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status resource_exhausted(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status failed_precondition(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status internal_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status data_loss(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status unimplemented(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
status unavailable(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

template <typename T>
class [[nodiscard]] status_or {
 public:
  status_or(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  status_or(status s) : status_(std::move(s)) {}    // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const status& get_status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  status status_;
  std::optional<T> value_;
};

}  // namespace hart

#define HART_STATUS_CONCAT_INNER(a, b) a##b
#define HART_STATUS_CONCAT(a, b) HART_STATUS_CONCAT_INNER(a, b)

/// Returns the status from the enclosing function if `expr` is not ok.
#define HART_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::hart::status hart_status_ = (expr);        \
    if (!hart_status_.ok()) return hart_status_; \
  } while (0)

/// `HART_ASSIGN_OR_RETURN(auto x, make_x());` — unwraps a status_or or returns its error.
#define HART_ASSIGN_OR_RETURN(lhs, expr) \
  HART_ASSIGN_OR_RETURN_IMPL(HART_STATUS_CONCAT(hart_statusor_, __LINE__), lhs, expr)
#define HART_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.get_status();          \
  lhs = std::move(tmp).value()
