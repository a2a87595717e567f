// File: cli/client_json.h
// `hart client`'s input: one JSON line -> one protocol::request, every field read with a
// checked reader (JSON type, integer without a fraction, finite, in range, fits its wire
// type), so nothing wraps, truncates or defaults silently. A refused line becomes one
// error line naming the field and the request it was for; nothing of it is sent.
//
//   parsed_request p = request_from_json(json::parse(line), tag);
//   if (!p.error.ok()) std::cout << error_line(p).dump() << "\n";
//   else send(p.request);
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hart::cli {

/// One input line, read. Either `error` is ok and `request` is what to send, or `error`
/// (invalid_argument, its message starting with `field`) says why nothing is sent.
struct parsed_request {
  protocol::request request;
  status error;
  /// The JSON field at fault, as a path ("max_new_tokens", "tokens[3]", "messages[0].role");
  /// empty when the line as a whole is (not an object, unknown verb).
  std::string field;
  /// The tag a control verb is sent with (0 for a generate: its replies carry its id).
  uint64_t tag = 0;
  /// The request's "id" exactly as the line wrote it (null when absent), so a client that
  /// multiplexes can match the error even when the id itself is what is wrong.
  nlohmann::json id;
};

/// Reads `{"<verb>": body}` (verbs and fields: README "Serving", docs/protocol.md §4);
/// `tag` is used when it is a control verb.
parsed_request request_from_json(const nlohmann::json& line, uint64_t tag);

/// The line `hart client` prints for a refused request: the shape of a server error reply
/// plus the field, {"error": {"tag", "id", "code", "field", "message"}}.
nlohmann::json error_line(const parsed_request& p);

}  // namespace hart::cli
