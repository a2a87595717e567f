#include "runtime/http/control_api.h"

namespace hart::http {

status_or<abort_body> parse_abort_body(const json& body) {
  abort_body a;
  json_fields f(body);
  HART_RETURN_IF_ERROR(f.only({"rid", "abort_all", "abort_message"}));
  HART_RETURN_IF_ERROR(f.get("rid", &a.rid));
  HART_RETURN_IF_ERROR(f.get("abort_all", &a.all));
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

json model_info_json(const std::string& model_path, uint64_t weight_version) {
  return {{"model_path", model_path},
          {"tokenizer_path", model_path},
          {"is_generation", true},
          {"preferred_sampling_params", nullptr},
          {"weight_version", std::to_string(weight_version)},
          {"has_image_understanding", false},
          {"has_audio_understanding", false}};
}

json weight_version_json(uint64_t weight_version) {
  return {{"weight_version", std::to_string(weight_version)}};
}

}  // namespace hart::http
