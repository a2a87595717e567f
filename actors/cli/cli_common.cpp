#include "actors/cli/cli_common.h"

#include <cstdio>

namespace hart::cli {

int fail(const status& s) {
  std::fprintf(stderr, "hart: error: %s\n", s.to_string().c_str());
  return 1;
}

status_or<std::unique_ptr<engine>> load_engine(const common_options& o) {
  engine_params p;
  p.model_dir = o.model_dir;
  p.n_threads = o.threads;
  p.deterministic = o.deterministic;
  p.verbose_load = true;
  if (!precision_parse(o.precision_name, &p.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  return engine::load(p);
}

status_or<tokenizer> load_tokenizer(const std::string& model_dir) {
  return tokenizer::load(model_dir + "/tokenizer.json");
}

}  // namespace hart::cli
