// File: runtime/protocol/validate.h
// Semantic checks of decoded messages against the limits in messages.h. decode_request and
// decode_reply call these; a server may also call validate_request on requests it builds
// itself (e.g. from a JSON client). Each failure is invalid_argument naming the field.
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <string_view>

namespace hart::protocol {

/// `scoring`: the request scores its prompt (logprobStartLen >= 0), so maxNewTokens may be 0.
status validate_sampling(const sampling_options& s, bool scoring = false);
status validate_generate(const generate_request& g);
status validate_request(const request& r);
/// Structural checks only (lists of equal length, enums in range).
status validate_reply(const reply& r);

/// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool utf8_valid(std::string_view s);

}  // namespace hart::protocol
