#include "tests/golden/golden_fixture.h"

#include "runtime/core/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace hart::testing {

std::vector<float> golden_set::floats(const std::string& name) const {
  const tensor_entry* e = ref.find(name);
  HART_CHECK(e && e->type == dtype::f32) << "golden tensor " << name;
  std::vector<float> v(e->numel());
  std::memcpy(v.data(), e->data, e->n_bytes);
  return v;
}

std::vector<int64_t> golden_set::ints(const std::string& name) const {
  const tensor_entry* e = ref.find(name);
  HART_CHECK(e && e->type == dtype::i64) << "golden tensor " << name;
  std::vector<int64_t> v(e->numel());
  std::memcpy(v.data(), e->data, e->n_bytes);
  return v;
}

bool golden_deterministic(const std::string& name) {
  // NOTE(hart): tiny-c's indexer scores have near-ties that BLAS kernels of other
  // CPUs (OpenBLAS picks them at run time) round differently; batch-invariant
  // fixed-order arithmetic makes its comparisons the same on every machine.
  return name == "tiny-c";
}

std::unique_ptr<golden_set> golden_load(const std::string& name, precision prec, bool deterministic,
                                        bool fp32_activations) {
  auto g = std::make_unique<golden_set>();
  g->dir = std::string(HART_TEST_DATA) + "/" + name;
  engine_params p;
  p.model_dir = g->dir;
  p.prec = prec;
  p.deterministic = deterministic || golden_deterministic(name);
  p.fp32_activations = fp32_activations;
  auto eng = engine::load(p);
  HART_CHECK(eng.ok()) << eng.get_status().to_string();
  g->eng = std::move(eng).value();
  auto ref = weight_store::open(g->dir + "/golden.safetensors");
  HART_CHECK(ref.ok()) << ref.get_status().to_string();
  g->ref = std::move(ref).value();
  const tensor_entry* ids = g->ref.find("input_ids");
  HART_CHECK(ids && ids->shape.size() == 2);
  g->batch = ids->shape[0];
  g->seq = ids->shape[1];
  g->vocab = g->eng->config().vocab_size;
  // NOTE(hart): against the reference itself, tiny-c's near-ties (one seen at a
  // 1e-5 relative score gap) may flip either way; allow 2 positions per row.
  g->near_tie_allowance = name == "tiny-c" ? 2 : 0;
  std::vector<int64_t> raw = g->ints("input_ids");
  g->input_ids.assign(g->batch, std::vector<int32_t>(g->seq));
  for (int64_t b = 0; b < g->batch; ++b) {
    for (int64_t s = 0; s < g->seq; ++s) g->input_ids[b][s] = int32_t(raw[b * g->seq + s]);
  }
  return g;
}

double rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double max_rel_error_row(const golden_set& g, const std::vector<float>& got, const std::vector<float>& want,
                         int64_t b, int64_t* worst_pos) {
  std::vector<std::pair<double, int64_t>> errs;
  for (int64_t s = 0; s < g.seq; ++s) {
    const double e = rel_error(got.data() + s * g.vocab, g.logits_row(want, b, s), g.vocab);
    errs.push_back({std::isnan(e) ? INFINITY : e, s});
  }
  std::sort(errs.begin(), errs.end(), std::greater<>());
  const size_t skip = std::min<size_t>(g.near_tie_allowance, errs.size() - 1);
  if (worst_pos) *worst_pos = errs[skip].second;
  return errs[skip].first;
}

}  // namespace hart::testing
