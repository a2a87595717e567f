// File: runtime/http/control_api.h
// The information endpoints' JSON (docs/http.md): the weight version and model facts to
// /get_weight_version, /model_info and /v1/models answers. Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/http/json_fields.h"

namespace hart::http {

/// GET /v1/models: the one model served.
json models_json(const std::string& model, int64_t created, int64_t max_context);

/// GET /model_info (and /get_model_info).
json model_info_json(const std::string& model_path, uint64_t weight_version);

/// GET /get_weight_version: {"weight_version": "<n>"} (a string, as SGLang's).
json weight_version_json(uint64_t weight_version);

}  // namespace hart::http
