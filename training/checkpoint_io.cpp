#include "training/checkpoint_io.h"

#include "runtime/model/config.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/weight_names.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

namespace hart::training {
namespace {

namespace fs = std::filesystem;

status_or<torch::Dtype> torch_dtype_of(const tensor_entry& e) {
  switch (e.type) {
    case dtype::f32:
      return torch::kFloat32;
    case dtype::f64:
      return torch::kFloat64;
    case dtype::bf16:
      return torch::kBFloat16;
    case dtype::f16:
      return torch::kFloat16;
    case dtype::i64:
      return torch::kInt64;
    case dtype::i32:
      return torch::kInt32;
    default:
      return unimplemented(
          "tensor '%s' in %s has dtype %s; the trainer loads F32/BF16/F16/F64 checkpoints only "
          "(dequantize FP8/FP4 first)",
          e.name.c_str(), e.file.c_str(), std::string(dtype_name(e.type)).c_str());
  }
}

// A copy of the mapped bytes as a tensor (mapped data may be unaligned).
status_or<torch::Tensor> read_tensor(const tensor_entry& e) {
  HART_ASSIGN_OR_RETURN(torch::Dtype dt, torch_dtype_of(e));
  torch::Tensor t = torch::empty(e.shape, dt);
  std::memcpy(t.data_ptr(), e.data, e.n_bytes);
  return t;
}

status load_weights(v4_model& model, const std::string& dir) {
  HART_ASSIGN_OR_RETURN(weight_store store, weight_store::open(dir));
  std::map<std::string, const tensor_entry*> by_name;
  for (const std::string& name : store.names()) {
    if (name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0) continue;  // MTP: not trained
    auto [it, fresh] = by_name.emplace(canonical_weight_name(name), store.find(name));
    if (!fresh) {
      return invalid_argument("%s: two spellings of tensor '%s': '%s' and '%s'", dir.c_str(),
                              it->first.c_str(), it->second->name.c_str(), name.c_str());
    }
  }
  const model_config& cfg = model.config();
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& kv : model.named_parameters()) targets.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) targets.emplace_back(kv.key(), kv.value());
  for (auto& [name, dst] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end() && name == "head.weight" && cfg.tie_word_embeddings)
      it = by_name.find("embed.weight");
    if (it == by_name.end()) {
      if (name.find(".experts.") != std::string::npos &&
          by_name.count(name.substr(0, name.find(".experts.")) + ".experts.gate_up_proj")) {
        return unimplemented(
            "%s: stacked expert tensors (experts.gate_up_proj) are not supported by the trainer yet",
            dir.c_str());
      }
      return not_found("%s: checkpoint lacks tensor '%s'", dir.c_str(), name.c_str());
    }
    const tensor_entry& e = *it->second;
    if (e.shape != dst.sizes().vec()) {
      return invalid_argument("%s: tensor '%s' (%s) has shape %s, expected %s", dir.c_str(), name.c_str(),
                              e.name.c_str(), e.shape_string().c_str(), c10::str(dst.sizes()).c_str());
    }
    HART_ASSIGN_OR_RETURN(torch::Tensor src, read_tensor(e));
    if (src.is_floating_point() != dst.is_floating_point()) {
      return invalid_argument("%s: tensor '%s' has dtype %s, expected %s", dir.c_str(), e.name.c_str(),
                              std::string(dtype_name(e.type)).c_str(),
                              dst.is_floating_point() ? "a float" : "I64/I32");
    }
    if (!dst.is_floating_point()) {
      const int64_t E = cfg.n_routed_experts;
      if (src.numel() && (src.min().item<int64_t>() < 0 || src.max().item<int64_t>() >= E)) {
        return invalid_argument("%s: '%s' holds expert ids outside [0, %lld)", dir.c_str(), e.name.c_str(),
                                (long long)E);
      }
    }
    dst.copy_(src);
  }
  return {};
}

status save(const v4_model& model, const std::string& dir, torch::Dtype dt, const std::string& config_dir) {
  if (dt != torch::kFloat32 && dt != torch::kBFloat16) {
    return invalid_argument("v4_model_save: dtype must be float32 or bfloat16");
  }
  if (fs::exists(fs::path(dir) / "model.safetensors.index.json")) {
    return failed_precondition(
        "v4_model_save: %s holds model.safetensors.index.json, which would shadow the saved weights",
        dir.c_str());
  }
  if (!fs::exists(fs::path(config_dir) / "config.json")) {
    return not_found("v4_model_save: %s has no config.json", config_dir.c_str());
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument("v4_model_save: cannot create %s: %s", dir.c_str(), ec.message().c_str());

  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& kv : model.named_parameters()) all.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) all.emplace_back(kv.key(), kv.value());
  std::vector<torch::Tensor> keep;  // owns the bytes until the file is written
  std::vector<tensor_to_write> out;
  for (auto& [name, t] : all) {
    torch::Tensor c = t.detach().to(torch::kCPU);
    c = (c.is_floating_point() ? c.to(dt) : c.to(torch::kInt64)).contiguous();
    keep.push_back(c);
    const dtype type = !c.is_floating_point()   ? dtype::i64
                       : dt == torch::kBFloat16 ? dtype::bf16
                                                : dtype::f32;
    out.push_back({name, type, c.sizes().vec(), c.data_ptr(), size_t(c.nbytes())});
  }
  HART_RETURN_IF_ERROR(
      safetensors_write((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}}));
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(config_dir) / f, dst = fs::path(dir) / f;
    if (!fs::exists(src) || (fs::exists(dst) && fs::equivalent(src, dst))) continue;
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) return invalid_argument("v4_model_save: cannot copy %s: %s", src.c_str(), ec.message().c_str());
  }
  return {};
}

}  // namespace

// LibTorch throws c10::Error; it stops here (style R28).
status v4_model_load_weights(v4_model& model, const std::string& dir) {
  try {
    return load_weights(model, dir);
  } catch (const c10::Error& e) {
    return internal_error("%s: loading weights: %s", dir.c_str(), e.what_without_backtrace());
  }
}

status_or<std::shared_ptr<v4_model>> v4_model_load(const std::string& dir) {
  HART_ASSIGN_OR_RETURN(model_config cfg, model_config_load(dir));
  HART_RETURN_IF_ERROR(cfg.validate());
  auto model = std::make_shared<v4_model>(cfg);
  HART_RETURN_IF_ERROR(v4_model_load_weights(*model, dir));
  return model;
}

status v4_model_save(const v4_model& model, const std::string& dir, torch::Dtype dtype,
                     const std::string& config_dir) {
  try {
    return save(model, dir, dtype, config_dir);
  } catch (const c10::Error& e) {
    return internal_error("v4_model_save %s: %s", dir.c_str(), e.what_without_backtrace());
  }
}

}  // namespace hart::training
