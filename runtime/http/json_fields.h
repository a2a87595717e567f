// File: runtime/http/json_fields.h
// Typed reads of a JSON request object's optional fields, shared by the OpenAI and SGLang
// parsers: a field that is absent or null keeps the caller's default; one of the wrong type
// or out of range is invalid_argument naming it with its path ("sampling_params.top_k: expected
// an integer in [-1, 2147483647], got a string").
//
//   HART_ASSIGN_OR_RETURN(json body, parse_body(text));
//   json_fields f(body);
//   HART_RETURN_IF_ERROR(f.get("temperature", &s.temperature));
#pragma once

#include "runtime/core/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace hart::http {

using json = nlohmann::json;

/// The request body as a JSON object: invalid_argument for malformed JSON or another type.
status_or<json> parse_body(std::string_view body);

/// `j` as text; invalid UTF-8 (a token's partial bytes) becomes U+FFFD instead of throwing.
std::string json_text(const json& j);

class json_fields {
 public:
  /// `object` must be a JSON object and outlive this; `prefix` names it in errors ("sampling_params.").
  explicit json_fields(const json& object, std::string prefix = {})
      : o_(object), prefix_(std::move(prefix)) {}

  /// Present and not null.
  bool has(const char* key) const;
  const json& at(const char* key) const { return o_.at(key); }
  /// `prefix` + `key`, for error messages.
  std::string name(const char* key) const { return prefix_ + key; }

  status get(const char* key, bool* out) const;
  status get(const char* key, float* out) const;
  status get(const char* key, std::string* out) const;
  /// An integer (or a number with an integral value) in [lo, hi].
  status get_int(const char* key, int64_t lo, int64_t hi, int64_t* out) const;
  /// A string or a list of strings (`stop`).
  status get_strings(const char* key, std::vector<std::string>* out) const;
  /// A list of integers in [0, 2^32) (token ids).
  status get_token_ids(const char* key, std::vector<uint32_t>* out) const;
  /// A JSON object (nested fields), or nullptr when absent or null.
  status get_object(const char* key, const json** out) const;

  /// invalid_argument naming the first key not in `known`.
  status only(std::initializer_list<std::string_view> known) const;
  /// invalid_argument when `key` is present with a value other than null, false, 0, "" or an
  /// empty list/object: a feature hart does not implement is refused, not silently ignored.
  status unsupported(const char* key, const char* what) const;
  /// The same for a number whose only supported value is `neutral` (repetition_penalty 1).
  status unsupported(const char* key, const char* what, float neutral) const;

 private:
  status wrong_type(const char* key, const char* expected) const;

  const json& o_;
  std::string prefix_;
};

}  // namespace hart::http
