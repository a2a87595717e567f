#include "runtime/worker/dummy_model.h"

#include "runtime/model/random_checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace hart::worker {

namespace fs = std::filesystem;

namespace {

// model_dir's config.json with only its first num_layers layers (0 = all).
status_or<nlohmann::json> dummy_config_json(const std::string& model_dir, int64_t num_layers) {
  std::ifstream in(model_dir + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (!in.is_open() || config.is_discarded() || !config.is_object()) {
    return invalid_argument("--load-format dummy: %s/config.json is missing or not a JSON object",
                            model_dir.c_str());
  }
  if (num_layers > 0) {
    if (status s = random_checkpoint_truncate_layers(config, num_layers); !s.ok()) {
      return invalid_argument("--num-layers: %s", s.message().c_str());
    }
  }
  return config;
}

}  // namespace

status_or<model_config> dummy_model_config(const std::string& model_dir, int64_t num_layers) {
  HART_ASSIGN_OR_RETURN(nlohmann::json config, dummy_config_json(model_dir, num_layers));
  return model_config_parse(config.dump(), model_dir + "/config.json");
}

status_or<std::unique_ptr<dummy_model>> dummy_model::create(const std::string& model_dir, int64_t num_layers,
                                                            uint64_t seed) {
  HART_ASSIGN_OR_RETURN(nlohmann::json config, dummy_config_json(model_dir, num_layers));
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hart-dummy-XXXXXX";
  if (!mkdtemp(pattern.data()))
    return internal_error("--load-format dummy: cannot create %s", pattern.c_str());
  std::unique_ptr<dummy_model> d(new dummy_model(pattern));
  random_checkpoint_options opt;
  opt.seed = seed;
  opt.format = checkpoint_format::release;
  if (!random_checkpoint_write(d->dir_, config, opt).ok()) {  // shapes off the FP8/MXFP4 blocks: BF16
    std::error_code ec;  // whatever the release attempt wrote goes first (its index would win at load)
    for (const fs::directory_entry& e : fs::directory_iterator(d->dir_, ec)) fs::remove_all(e.path(), ec);
    opt.format = checkpoint_format::bf16;
    HART_RETURN_IF_ERROR(random_checkpoint_write(d->dir_, config, opt));
  }
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    if (fs::exists(model_dir + "/" + f)) fs::copy_file(model_dir + "/" + f, d->dir_ + "/" + f, ec);
    if (ec) return internal_error("--load-format dummy: copying %s: %s", f, ec.message().c_str());
  }
  std::fprintf(stderr, "hart: dummy weights (random, %s format, %lld layers) in %s\n",
               opt.format == checkpoint_format::release ? "release" : "bf16",
               (long long)config.value("num_hidden_layers", int64_t(0)), d->dir_.c_str());
  return d;
}

dummy_model::~dummy_model() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace hart::worker
