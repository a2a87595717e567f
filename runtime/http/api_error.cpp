#include "runtime/http/api_error.h"

#include <cctype>

namespace hart::http {

int http_status_of(status_code c) {
  switch (c) {
    case status_code::invalid_argument:
    case status_code::out_of_range:
    case status_code::failed_precondition:
      return 400;
    case status_code::not_found:
      return 404;
    case status_code::resource_exhausted:
      return 429;
    case status_code::unimplemented:
      return 501;
    case status_code::unavailable:
    case status_code::cancelled:
      return 503;
    default:
      return 500;
  }
}

json error_body(const status& s, bool from_parser) {
  const int http = http_status_of(s.code());
  json param = nullptr;
  // Field names as the parsers write them: a path of identifiers, dots and indices.
  const std::string& m = s.message();
  const size_t colon = m.find(": ");
  if (from_parser && colon != std::string::npos && colon > 0) {
    bool field = true;
    for (size_t i = 0; i < colon && field; ++i) {
      const unsigned char c = m[i];
      field = std::isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
    }
    if (field) param = m.substr(0, colon);
  }
  return {{"error",
           {{"message", m},
            {"type", http < 500 ? "invalid_request_error" : "server_error"},
            {"param", param},
            {"code", status_code_name(s.code())}}}};
}

status status_from_text(const std::string& text) {
  for (int c = int(status_code::invalid_argument); c <= int(status_code::unimplemented); ++c) {
    const std::string name = std::string(status_code_name(status_code(c))) + ": ";
    if (text.compare(0, name.size(), name) == 0) return status(status_code(c), text.substr(name.size()));
  }
  return status(status_code::internal, text);
}

}  // namespace hart::http
