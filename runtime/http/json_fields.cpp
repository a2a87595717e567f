#include "runtime/http/json_fields.h"

#include <cmath>

namespace hart::http {

status_or<json> parse_body(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("the request body is not valid JSON");
  if (!j.is_object())
    return invalid_argument("the request body must be a JSON object, got %s", j.type_name());
  return j;
}

std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool json_fields::has(const char* key) const {
  const auto it = o_.find(key);
  return it != o_.end() && !it->is_null();
}

status json_fields::wrong_type(const char* key, const char* expected) const {
  return invalid_argument("%s: expected %s, got %s", name(key).c_str(), expected, o_.at(key).type_name());
}

status json_fields::get(const char* key, bool* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (!v.is_boolean()) return wrong_type(key, "a boolean");
  *out = v.get<bool>();
  return {};
}

status json_fields::get(const char* key, float* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (!v.is_number()) return wrong_type(key, "a number");
  *out = v.get<float>();
  return {};
}

status json_fields::get(const char* key, std::string* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (!v.is_string()) return wrong_type(key, "a string");
  *out = v.get<std::string>();
  return {};
}

status json_fields::get_int(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  const std::string expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(hi))
      return invalid_argument("%s: %llu, expected %s", name(key).c_str(), (unsigned long long)u,
                              expected.c_str());
    x = int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d == std::floor(d) && d >= double(lo) && d <= double(hi)))
      return invalid_argument("%s: %g, expected %s", name(key).c_str(), d, expected.c_str());
    x = int64_t(d);
  } else {
    return wrong_type(key, expected.c_str());
  }
  if (x < lo || x > hi)
    return invalid_argument("%s: %lld, expected %s", name(key).c_str(), (long long)x, expected.c_str());
  *out = x;
  return {};
}

status json_fields::get_strings(const char* key, std::vector<std::string>* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (v.is_string()) {
    *out = {v.get<std::string>()};
    return {};
  }
  if (!v.is_array()) return wrong_type(key, "a string or a list of strings");
  std::vector<std::string> r;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return invalid_argument("%s[%zu]: expected a string, got %s", name(key).c_str(), i, v[i].type_name());
    r.push_back(v[i].get<std::string>());
  }
  *out = std::move(r);
  return {};
}

status json_fields::get_token_ids(const char* key, std::vector<uint32_t>* out) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (!v.is_array()) return wrong_type(key, "a list of token ids");
  std::vector<uint32_t> r;
  r.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_unsigned() || v[i].get<uint64_t>() > UINT32_MAX)
      return invalid_argument("%s[%zu]: expected a token id (an integer >= 0), got %s", name(key).c_str(), i,
                              v[i].is_number() ? json_text(v[i]).c_str() : v[i].type_name());
    r.push_back(uint32_t(v[i].get<uint64_t>()));
  }
  *out = std::move(r);
  return {};
}

status json_fields::get_object(const char* key, const json** out) const {
  *out = nullptr;
  if (!has(key)) return {};
  const json& v = o_.at(key);
  if (!v.is_object()) return wrong_type(key, "an object");
  *out = &v;
  return {};
}

status json_fields::only(std::initializer_list<std::string_view> known) const {
  for (auto it = o_.begin(); it != o_.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) return invalid_argument("%s%s: unknown field", prefix_.c_str(), it.key().c_str());
  }
  return {};
}

status json_fields::unsupported(const char* key, const char* what) const {
  if (!has(key)) return {};
  const json& v = o_.at(key);
  const bool off = (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0.0) ||
                   (v.is_string() && v.get<std::string>().empty()) ||
                   ((v.is_array() || v.is_object()) && v.empty());
  if (off) return {};
  return invalid_argument("%s: %s is not supported by this server", name(key).c_str(), what);
}

status json_fields::unsupported(const char* key, const char* what, float neutral) const {
  if (!has(key)) return {};
  float v = neutral;
  HART_RETURN_IF_ERROR(get(key, &v));
  if (v == neutral) return {};
  return invalid_argument("%s: %s is not supported by this server", name(key).c_str(), what);
}

}  // namespace hart::http
