#include "runtime/http/control_api.h"

namespace hart::http {

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

json weight_version_json(uint64_t weight_version) { return {{"weight_version", std::to_string(weight_version)}}; }

}  // namespace hart::http
