// File: runtime/http/control_api.h
// The control and information endpoints' JSON (docs/http.md): POST /abort_request and
// /pause_generation bodies to their control verbs, the weight updates' bodies; the stats, weight version and
// model facts to /v1/loads, /get_weight_version, /model_info and /v1/models answers. Pure functions.
#pragma once

#include "runtime/core/status.h"
#include "runtime/http/json_fields.h"
#include "runtime/protocol/messages.h"

#include <cstdint>
#include <string>

namespace hart::http {

/// POST /abort_request {rid, abort_all, abort_message}: one rid, or every generation
/// (abort_all); abort_message is the aborted samples' finish_reason message ("" = the default).
struct abort_body {
  std::string rid;
  bool all = false;
  std::string message;
};
status_or<abort_body> parse_abort_body(const json& body);

/// POST /pause_generation {mode}: abort (SGLang's default) | retract | in_place.
status_or<protocol::pause_mode> parse_pause_body(const json& body);

/// POST /update_weights_from_disk {model_path, load_format, weight_version, abort_all_requests,
/// flush_cache}: a checkpoint directory to serve, as `version` (0: the next).
struct disk_update_body {
  std::string model_path;
  uint64_t version = 0;
  bool abort_all = false;
};
status_or<disk_update_body> parse_disk_update_body(const json& body);

/// POST /update_weight_version {new_version, abort_all_requests}.
struct version_update_body {
  uint64_t version = 0;
  bool abort_all = false;
};
status_or<version_update_body> parse_version_update_body(const json& body);

/// GET /v1/loads in SGLang's GetLoads shape (one attention-DP rank) from the stats entries.
json loads_json(const protocol::stats_reply& stats, int64_t unix_seconds);

/// GET /v1/models: the one model served.
json models_json(const std::string& model, int64_t created, int64_t max_context);

/// GET /model_info (and /get_model_info): `model_path` the checkpoint directory serving.
json model_info_json(const std::string& model_path, const std::string& tokenizer_path,
                     uint64_t weight_version);

/// GET /server_info (and /get_server_info), SGLang's shape: the server's arguments at the top
/// level with `model_path` the checkpoint directory serving, `version`, `weight_version` and
/// `internal_states` (one entry per scheduler: its stats).
json server_info_json(const json& server_args, const std::string& model_path,
                      const protocol::stats_reply& stats, uint64_t weight_version);

/// GET /get_weight_version: {"weight_version": "<n>"} (a string, as SGLang's).
json weight_version_json(uint64_t weight_version);

/// The value of stats entry `name`; 0 when absent.
double stats_value(const protocol::stats_reply& stats, const std::string& name);

}  // namespace hart::http
