#include "runtime/http/control_api.h"

namespace hart::http {

status_or<abort_body> parse_abort_body(const json& body) {
  abort_body a;
  json_fields f(body);
  HART_RETURN_IF_ERROR(f.only({"rid", "abort_all", "abort_message"}));
  HART_RETURN_IF_ERROR(f.get("rid", &a.rid));
  HART_RETURN_IF_ERROR(f.get("abort_all", &a.all));
  HART_RETURN_IF_ERROR(f.get("abort_message", &a.message));
  if (!a.all && a.rid.empty()) return invalid_argument("rid: required unless abort_all is true");
  return a;
}

status_or<protocol::pause_mode> parse_pause_body(const json& body) {
  json_fields f(body);
  HART_RETURN_IF_ERROR(f.only({"mode"}));
  std::string mode = "abort";
  HART_RETURN_IF_ERROR(f.get("mode", &mode));
  if (mode == "abort") return protocol::pause_mode::abort;
  if (mode == "retract") return protocol::pause_mode::retract;
  if (mode == "in_place") return protocol::pause_mode::in_place;
  return invalid_argument("mode: '%s', expected abort, retract or in_place", mode.c_str());
}

namespace {

// A weight version as SGLang clients send it: a string ("7", as /get_weight_version answers) or
// an integer; hart's versions are integers that only grow, so it must be one >= 1.
status get_version(const json_fields& f, const char* key, uint64_t* out) {
  if (!f.has(key)) return {};
  const json& v = f.at(key);
  std::string text;
  if (v.is_number_unsigned() || v.is_number_integer()) {
    text = v.dump();
  } else if (v.is_string()) {
    text = v.get<std::string>();
  } else {
    return invalid_argument("%s: expected a version (a positive integer or its decimal string)",
                            f.name(key).c_str());
  }
  uint64_t n = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + uint64_t(c - '0');
  }
  if (!ok || n == 0)
    return invalid_argument(
        "%s: '%s' is not a version hart can serve (a positive integer: versions only grow)",
        f.name(key).c_str(), text.c_str());
  *out = n;
  return {};
}

}  // namespace

status_or<disk_update_body> parse_disk_update_body(const json& body) {
  disk_update_body d;
  json_fields f(body);
  HART_RETURN_IF_ERROR(
      f.only({"model_path", "load_format", "weight_version", "abort_all_requests", "flush_cache"}));
  HART_RETURN_IF_ERROR(f.get("model_path", &d.model_path));
  if (d.model_path.empty())
    return invalid_argument("model_path: required (a checkpoint directory on the server)");
  std::string format = "auto";
  HART_RETURN_IF_ERROR(f.get("load_format", &format));
  if (format != "auto" && format != "safetensors")
    return invalid_argument("load_format: '%s'; hart reads safetensors checkpoints (auto)", format.c_str());
  HART_RETURN_IF_ERROR(get_version(f, "weight_version", &d.version));
  HART_RETURN_IF_ERROR(f.get("abort_all_requests", &d.abort_all));
  bool flush = true;
  HART_RETURN_IF_ERROR(f.get("flush_cache", &flush));
  if (!flush)
    return invalid_argument(
        "flush_cache: false; cached prefixes hold the old weights' KV, so hart always drops them");
  return d;
}

status_or<version_update_body> parse_version_update_body(const json& body) {
  version_update_body v;
  json_fields f(body);
  HART_RETURN_IF_ERROR(f.only({"new_version", "abort_all_requests"}));
  if (!f.has("new_version")) return invalid_argument("new_version: required");
  HART_RETURN_IF_ERROR(get_version(f, "new_version", &v.version));
  HART_RETURN_IF_ERROR(f.get("abort_all_requests", &v.abort_all));
  return v;
}

double stats_value(const protocol::stats_reply& stats, const std::string& name) {
  for (const auto& [k, v] : stats.entries) {
    if (k == name) return v;
  }
  return 0.0;
}

json loads_json(const protocol::stats_reply& st, int64_t unix_seconds) {
  const int64_t running = int64_t(stats_value(st, "running")),
                waiting = int64_t(stats_value(st, "queue_depth"));
  const double used = stats_value(st, "cache_full_pages_used"),
               total = stats_value(st, "cache_full_pages_total");
  const double usage = total > 0 ? used / total : 0.0;
  json rank = {{"dp_rank", 0},
               {"num_running_reqs", running},
               {"num_waiting_reqs", waiting},
               {"num_reqs", running + waiting},
               {"num_total_reqs", running + waiting},
               {"token_usage", usage},
               {"gen_throughput", stats_value(st, "tokens_per_second")},
               {"cache_hit_rate", stats_value(st, "cache_hit_rate")}};
  return {{"timestamp", unix_seconds},
          {"dp_rank_count", 1},
          {"loads", json::array({rank})},
          {"aggregate",
           {{"total_running_reqs", running},
            {"total_waiting_reqs", waiting},
            {"total_reqs", running + waiting},
            {"avg_token_usage", usage},
            {"avg_throughput", stats_value(st, "tokens_per_second")}}}};
}

json models_json(const std::string& model, int64_t created, int64_t max_context) {
  json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "hart"}, {"root", model}};
  if (max_context > 0) m["max_model_len"] = max_context;
  return {{"object", "list"}, {"data", json::array({std::move(m)})}};
}

json model_info_json(const std::string& model_path, const std::string& tokenizer_path,
                     uint64_t weight_version) {
  return {{"model_path", model_path},
          {"tokenizer_path", tokenizer_path},
          {"is_generation", true},
          {"preferred_sampling_params", nullptr},
          {"weight_version", std::to_string(weight_version)},
          {"has_image_understanding", false},
          {"has_audio_understanding", false}};
}

json server_info_json(const json& server_args, const std::string& model_path,
                      const protocol::stats_reply& stats, uint64_t weight_version) {
  json j = server_args.is_object() ? server_args : json::object();
  j["model_path"] = model_path;
  json state = json::object();
  for (const auto& [k, v] : stats.entries) state[k] = v;
  j["version"] = "hart";
  j["weight_version"] = std::to_string(weight_version);
  j["internal_states"] = json::array({std::move(state)});
  return j;
}

json weight_version_json(uint64_t weight_version) {
  return {{"weight_version", std::to_string(weight_version)}};
}

}  // namespace hart::http
