// File: runtime/http/api_error.h
// Failures as HTTP answers: a status code per hart::status_code and OpenAI's error object,
// which every endpoint uses (SGLang's clients read `error.message` too).
//
//   res.status = http_status_of(s.code());
//   res.body = json_text(error_body(s));
//   // {"error": {"message": "temperature: ...", "type": "invalid_request_error",
//   //            "param": "temperature", "code": "invalid_argument"}}
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/json_fields.h"

#include <string>

namespace hart::http {

/// 400 invalid_argument / out_of_range / failed_precondition, 401 (never from a status),
/// 404 not_found, 429 resource_exhausted, 501 unimplemented, 503 unavailable / cancelled,
/// 500 otherwise.
int http_status_of(status_code c);

/// {"error": {"message", "type", "param", "code"}}: `type` is invalid_request_error for a
/// client's fault, server_error else; `param`, with `from_parser` (a request parser's error,
/// whose messages start with the field: "max_tokens: ..."), that field, else null; `code` the
/// status code's name.
json error_body(const status& s, bool from_parser = false);

/// A status written as status::to_string() ("out_of_range: request 3: ..."), e.g. a finish
/// event's message; internal when the text names no code.
status status_from_text(const std::string& text);

}  // namespace hart::http
