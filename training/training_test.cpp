// The LibTorch V4 model and trainer against the Hugging Face goldens, the CPU
// engine, finite differences and a hand-computed AdamW update.
#include "runtime/core/status_testing.h"
#include "runtime/model/engine.h"
#include "tests/golden/golden_fixture.h"
#include "training/checkpoint_io.h"
#include "training/trainer.h"
#include "training/v4_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

namespace hart::training {
namespace {

namespace fs = std::filesystem;

std::string data_dir(const std::string& name) {
  return std::string(HART_TEST_DATA) + "/" + name;
}

// A fresh directory per test, removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag) {
    path = fs::temp_directory_path() / ("hart-training-" + tag + "-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string operator/(const std::string& sub) const { return (path / sub).string(); }
};

// The golden tensors of a fixture, read as golden_fixture.h reads them (no engine).
testing::golden_set golden(const std::string& name) {
  testing::golden_set g;
  g.dir = data_dir(name);
  auto ref = weight_store::open(g.dir + "/golden.safetensors");
  EXPECT_TRUE(ref.ok()) << ref.get_status().to_string();
  g.ref = std::move(ref).value();
  const tensor_entry* ids = g.ref.find("input_ids");
  g.batch = ids->shape[0];
  g.seq = ids->shape[1];
  g.vocab = g.ref.find("logits")->shape[2];
  std::vector<int64_t> raw = g.ints("input_ids");
  g.input_ids.assign(g.batch, std::vector<int32_t>(g.seq));
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < g.seq; ++s) g.input_ids[b][s] = int32_t(raw[b * g.seq + s]);
  }
  return g;
}

torch::Tensor ids_tensor(const std::vector<std::vector<int32_t>>& rows) {
  torch::Tensor t = torch::empty({int64_t(rows.size()), int64_t(rows[0].size())}, torch::kLong);
  for (size_t b = 0; b < rows.size(); ++b) {
    for (size_t s = 0; s < rows[b].size(); ++s) t[b][s] = int64_t(rows[b][s]);
  }
  return t;
}

std::vector<float> row_floats(const torch::Tensor& logits, int64_t b) {
  torch::Tensor r = logits[b].to(torch::kFloat32).contiguous();
  return std::vector<float>(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
}

std::shared_ptr<v4_model> load_model(const std::string& dir) {
  auto m = v4_model_load(dir);
  EXPECT_TRUE(m.ok()) << m.get_status().to_string();
  return m.ok() ? m.value() : nullptr;
}

// Engine logits of every position of each row, deterministic, ties as the reference's full pass.
std::vector<std::vector<float>> engine_logits(const std::string& dir,
                                              const std::vector<std::vector<int32_t>>& rows) {
  engine_params p;
  p.model_dir = dir;
  p.deterministic = true;
  auto eng = engine::load(p);
  EXPECT_TRUE(eng.ok()) << eng.get_status().to_string();
  std::vector<std::vector<float>> out;
  for (const auto& r : rows) {
    sequence_state s = eng.value()->new_sequence();
    s.tie_reference_length = int64_t(r.size());
    out.emplace_back();
    EXPECT_TRUE(eng.value()->prefill(s, r, logits_request::all, &out.back()).ok());
  }
  return out;
}

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  double worst = 0;
  for (size_t s = 0; s * vocab < want.size(); ++s) {
    worst = std::max(worst, testing::rel_error(got.data() + s * vocab, want.data() + s * vocab, vocab));
  }
  return worst;
}

// -- (a) Hugging Face goldens ----------------------------------------------

// The reference's indexer picks (golden `topk.<layer>`: [B, S, k], entry
// indices, -1 = none, the layout of forced_routing::picks) of every CSA layer.
forced_routing golden_picks(const testing::golden_set& g, const model_config& cfg) {
  forced_routing f;
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    const std::string name = "topk." + std::to_string(il);
    const tensor_entry* e = g.ref.find(name);
    if (cfg.layer_kinds[il] != attention_kind::csa || !e) continue;
    f.picks[il] = torch::tensor(g.ints(name), torch::kLong).view(e->shape);
  }
  return f;
}

// Every position of every golden row within the issue bound (1e-4 relative).
void expect_rows_match_golden(const testing::golden_set& g, const torch::Tensor& logits,
                              const std::string& what) {
  const std::vector<float> want = g.floats("logits");
  for (int64_t b = 0; b < g.batch; ++b) {
    int64_t worst = 0;
    const double err = testing::max_rel_error_row(g, row_floats(logits, b), want, b, &worst);
    std::printf("%s row %lld: max relative error %.3g (position %lld)\n", what.c_str(), (long long)b, err,
                (long long)worst);
    EXPECT_LE(err, 1e-4) << what << " row " << b << " position " << worst;
  }
}

// Own routing: every position of every row within the issue bound.
// NOTE(hart): only fixtures whose indexer has no near-ties; tiny-c's flip with
// the BLAS kernel and thread count (row 1 reaches 2.3e-4 and 2.3e-2 with
// OpenBLAS's Zen kernels at 1 and 2 threads), so training_golden_picks checks it.
class training_golden : public ::testing::TestWithParam<const char*> {};

TEST_P(training_golden, logits_match_reference_fp32) {
  torch::NoGradGuard no_grad;
  testing::golden_set g = golden(GetParam());
  auto model = load_model(g.dir);
  ASSERT_TRUE(model);
  torch::Tensor logits = model->forward(ids_tensor(g.input_ids));
  expect_rows_match_golden(g, logits, GetParam());
}

INSTANTIATE_TEST_SUITE_P(fixtures, training_golden, ::testing::Values("tiny-a", "tiny-b"));

// The reference's indexer picks forced at every CSA layer (a row's error then
// no longer hangs on its near-ties): the rest of the model against the
// reference at every position, none set aside.
class training_golden_picks : public ::testing::TestWithParam<const char*> {};

TEST_P(training_golden_picks, forced_reference_picks_give_reference_logits_fp32) {
  torch::NoGradGuard no_grad;
  testing::golden_set g = golden(GetParam());
  auto model = load_model(g.dir);
  ASSERT_TRUE(model);
  const forced_routing ref = golden_picks(g, model->config());
  ASSERT_FALSE(ref.picks.empty()) << GetParam() << " has CSA layers with golden picks";
  ASSERT_TRUE(model->check_forced(ref, g.batch, g.seq).ok())
      << model->check_forced(ref, g.batch, g.seq).to_string();
  torch::Tensor logits = model->forward(ids_tensor(g.input_ids), &ref);
  expect_rows_match_golden(g, logits, std::string(GetParam()) + ", reference picks");
}

// The trainer's own indexer, each CSA layer fed the reference's activations
// (its picks forced upstream), picks the reference's entries but at near-ties.
// NOTE(hart): judged on the forced pass because an unforced one cascades: after
// tiny-c's one flip at layer 4 (row 1, position 1031; OpenBLAS Zen kernels, 2
// threads) layer 6 differs at 18 positions with gaps up to 0.53.
TEST_P(training_golden_picks, own_picks_match_reference_but_at_near_ties) {
  // NOTE(hart): fp32 scores move ~1e-6 relative with summation order; the
  // flips measured have gaps 1.0e-6 and 1.2e-6 to the k-th score (tiny-c
  // layer 4), the near-ties that could flip lie within 1e-4 (tiny-c: at most
  // 10 per layer, 3 under 1e-5, plus up to 7 exact ties at 0 that torch.topk
  // breaks as the reference does). A wrong indexer moves most positions.
  constexpr double k_gap = 1e-4;              // |score - k-th score| / |k-th score| of a differing pick
  constexpr double k_differ_fraction = 0.01;  // of a layer's positions (tiny-c: 22 of 2200)
  torch::NoGradGuard no_grad;
  testing::golden_set g = golden(GetParam());
  auto model = load_model(g.dir);
  ASSERT_TRUE(model);
  const forced_routing ref = golden_picks(g, model->config());
  ASSERT_FALSE(ref.picks.empty()) << GetParam() << " has CSA layers with golden picks";
  ASSERT_TRUE(model->check_forced(ref, g.batch, g.seq).ok());
  indexer_trace trace;
  model->forward(ids_tensor(g.input_ids), &ref, &trace);
  for (const auto& [il, ref_picks] : ref.picks) {
    ASSERT_EQ(trace.picks.count(il), 1u) << "layer " << il;
    auto want = ref_picks.accessor<int64_t, 3>();
    auto got = trace.picks.at(il).accessor<int64_t, 3>();
    const torch::Tensor scores = trace.scores.at(il).to(torch::kFloat64);
    auto score = scores.accessor<double, 3>();
    int64_t n_differ = 0, worst_b = -1, worst_t = -1, worst_e = -1;
    double worst_gap = 0;
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t t = 0; t < g.seq; ++t) {
        std::set<int64_t> own, theirs;
        for (int64_t k = 0; k < got.size(2); ++k) {
          if (got[b][t][k] >= 0) own.insert(got[b][t][k]);
        }
        for (int64_t k = 0; k < want.size(2); ++k) {
          if (want[b][t][k] >= 0) theirs.insert(want[b][t][k]);
        }
        if (own == theirs) continue;
        ++n_differ;
        double kth = INFINITY;  // the lowest score the trainer picked
        for (int64_t e : own) kth = std::min(kth, score[b][t][e]);
        std::vector<int64_t> differ;
        std::set_symmetric_difference(own.begin(), own.end(), theirs.begin(), theirs.end(),
                                      std::back_inserter(differ));
        for (int64_t e : differ) {
          const double s = score[b][t][e];
          const double gap = s == kth ? 0.0 : own.empty() ? INFINITY : std::abs(s - kth) / std::abs(kth);
          if (worst_e >= 0 && gap <= worst_gap) continue;
          worst_gap = gap;
          worst_b = b;
          worst_t = t;
          worst_e = e;
        }
      }
    }
    std::printf("%s layer %lld: picks differ at %lld positions, worst relative gap to the k-th score %.3g\n",
                GetParam(), (long long)il, (long long)n_differ, worst_gap);
    EXPECT_LE(worst_gap, k_gap) << GetParam() << " layer " << il << " row " << worst_b << " position "
                                << worst_t << " entry " << worst_e;
    EXPECT_LE(n_differ, int64_t(k_differ_fraction * double(g.batch * g.seq)))
        << GetParam() << " layer " << il;
  }
}

INSTANTIATE_TEST_SUITE_P(fixtures, training_golden_picks, ::testing::Values("tiny-a", "tiny-b", "tiny-c"));

// -- (b) the CPU engine on a random checkpoint -------------------------------

TEST(training_engine, random_checkpoint_logits_match_engine_exact) {
  torch::NoGradGuard no_grad;
  temp_dir tmp("random");
  auto cfg = model_config_load(data_dir("tiny-a"));
  ASSERT_TRUE(cfg.ok());
  v4_model model(cfg.value());
  model.init_random(7, 0.08);
  ASSERT_TRUE(v4_model_save(model, tmp / "ckpt", torch::kFloat32, data_dir("tiny-a")).ok());
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> rows(2, std::vector<int32_t>(120));
  for (auto& r : rows) {
    for (int32_t& t : r) t = int32_t(rng() % cfg.value().vocab_size);
  }
  torch::Tensor logits = model.forward(ids_tensor(rows));
  auto want = engine_logits(tmp / "ckpt", rows);
  for (size_t b = 0; b < rows.size(); ++b) {
    const double err = max_rel_error(row_floats(logits, int64_t(b)), want[b], cfg.value().vocab_size);
    std::printf("random tiny-a row %zu: max relative error vs engine %.3g\n", b, err);
    EXPECT_LE(err, 1e-4);
  }
}

// -- (b2) routing replay: the engine's decisions forced into the trainer ---------

// The engine's routing of `row` (deterministic, ties as the reference's full pass) as the server returns it.
protocol::routing_info engine_routing(const std::string& dir, const std::vector<int32_t>& row) {
  engine_params p;
  p.model_dir = dir;
  p.deterministic = true;
  auto eng = engine::load(p);
  EXPECT_TRUE(eng.ok()) << eng.get_status().to_string();
  sequence_state s = eng.value()->new_sequence();
  s.tie_reference_length = int64_t(row.size());
  forward_trace t;
  EXPECT_TRUE(eng.value()->prefill(s, row, logits_request::none, nullptr, &t).ok());
  protocol::routing_info r;
  r.positions = uint32_t(row.size());
  for (const auto& [l, ids] : t.experts)
    r.experts.push_back({uint32_t(l), uint32_t(ids.size() / row.size()), ids});
  for (const auto& [l, ids] : t.topk)
    r.picks.push_back({uint32_t(l), uint32_t(ids.size() / row.size()), ids});
  return r;
}

TEST(training_replay, forced_engine_routing_reproduces_its_logits_and_other_routing_changes_them) {
  torch::NoGradGuard no_grad;
  temp_dir tmp("replay");
  auto cfg = model_config_load(data_dir("tiny-a"));
  ASSERT_TRUE(cfg.ok());
  const int64_t V = cfg.value().vocab_size, E = cfg.value().n_routed_experts;
  v4_model model(cfg.value());
  model.init_random(11, 0.08);
  ASSERT_TRUE(v4_model_save(model, tmp / "ckpt", torch::kFloat32, data_dir("tiny-a")).ok());
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> rows(2, std::vector<int32_t>(100));
  for (auto& r : rows) {
    for (int32_t& t : r) t = int32_t(rng() % V);
  }
  std::vector<protocol::routing_info> captured;
  for (const auto& r : rows) captured.push_back(engine_routing(tmp / "ckpt", r));
  auto forced = forced_routing_from(captured, 100);
  ASSERT_TRUE(forced.ok()) << forced.get_status().to_string();
  ASSERT_FALSE(forced->picks.empty()) << "tiny-a has CSA layers";
  ASSERT_TRUE(model.check_forced(*forced, 2, 100).ok()) << model.check_forced(*forced, 2, 100).to_string();

  const torch::Tensor ids = ids_tensor(rows);
  const torch::Tensor own = model.forward(ids), replayed = model.forward(ids, &forced.value());
  const auto want = engine_logits(tmp / "ckpt", rows);
  for (int64_t b = 0; b < 2; ++b) {
    const double err = max_rel_error(row_floats(replayed, b), want[size_t(b)], V);
    std::printf("replay row %lld: forced vs engine %.3g, own vs forced %.3g\n", (long long)b, err,
                max_rel_error(row_floats(own, b), row_floats(replayed, b), V));
    EXPECT_LE(err, 1e-4) << "forcing the engine's routing gives the engine's logits";
  }

  // Other decisions change the output: every token's experts moved by one, every pick dropped.
  forced_routing moved = *forced;
  for (auto& [l, t] : moved.experts) t = (t + 1) % E;
  forced_routing no_picks = *forced;
  for (auto& [l, t] : no_picks.picks) t = torch::full_like(t, -1);
  for (const forced_routing* other : {&moved, &no_picks}) {
    ASSERT_TRUE(model.check_forced(*other, 2, 100).ok());
    const torch::Tensor changed = model.forward(ids, other);
    EXPECT_GT(max_rel_error(row_floats(changed, 0), row_floats(replayed, 0), V), 1e-2)
        << "forcing is not ignored";
  }

  // Bad forcing is refused before the forward.
  forced_routing bad = *forced;
  bad.experts.begin()->second = bad.experts.begin()->second.narrow(1, 0, 50);
  EXPECT_FALSE(model.check_forced(bad, 2, 100).ok()) << "wrong length";
  bad = *forced;
  bad.experts.begin()->second = torch::full_like(bad.experts.begin()->second, E);
  EXPECT_FALSE(model.check_forced(bad, 2, 100).ok()) << "expert id E";
  bad = *forced;
  bad.picks[0] = forced->picks.begin()->second;  // layer 0 is a sliding-window layer
  EXPECT_FALSE(model.check_forced(bad, 2, 100).ok()) << "picks for a non-CSA layer";
  bad = *forced;
  bad.experts[99] = forced->experts.begin()->second;
  EXPECT_FALSE(model.check_forced(bad, 2, 100).ok()) << "no layer 99";
  captured[1].positions = 99;
  EXPECT_FALSE(forced_routing_from(captured, 100).ok()) << "a row whose ids are not positions x k";
}

// -- (c) gradients vs central finite differences ------------------------------

constexpr const char* k_small_config = R"({
  "model_type": "deepseek_v4", "vocab_size": 40, "dim": 32, "n_layers": 3, "n_heads": 2, "head_dim": 16,
  "rope_head_dim": 8, "q_lora_rank": 16, "o_groups": 2, "o_lora_rank": 8, "window_size": 6,
  "compress_ratios": [0, 4, 8], "num_hash_layers": 1, "index_n_heads": 2, "index_head_dim": 8,
  "index_topk": 2, "n_routed_experts": 4, "n_shared_experts": 1, "n_activated_experts": 2,
  "moe_inter_dim": 8, "route_scale": 1.5, "swiglu_limit": 10.0, "rope_theta": 10000.0,
  "compress_rope_theta": 160000.0,
  "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64,
                   "beta_fast": 32, "beta_slow": 1}})";

TEST(training_grad, autograd_matches_central_differences_fp64) {
  auto cfg = model_config_parse(k_small_config, "small");
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  v4_model model(cfg.value());
  model.init_random(11, 0.2);
  model.to(torch::kFloat64);
  model.set_compute_dtype(torch::kFloat64);
  torch::Generator gen = at::detail::createCPUGenerator(5);
  torch::Tensor ids = torch::randint(0, 40, {2, 20}, gen, torch::kLong);
  torch::Tensor probe = torch::randn({2, 20, 40}, gen, torch::kFloat64);
  auto loss = [&] { return (model.forward(ids) * probe).sum(); };
  loss().backward();

  const std::vector<std::string> names = {"embed.weight",
                                          "head.weight",
                                          "norm.weight",
                                          "hc_head_fn",
                                          "hc_head_base",
                                          "hc_head_scale",
                                          "layers.0.hc_attn_fn",
                                          "layers.0.hc_attn_base",
                                          "layers.0.hc_attn_scale",
                                          "layers.1.hc_ffn_fn",
                                          "layers.0.attn_norm.weight",
                                          "layers.1.ffn_norm.weight",
                                          "layers.0.attn.wq_a.weight",
                                          "layers.1.attn.q_norm.weight",
                                          "layers.1.attn.wq_b.weight",
                                          "layers.2.attn.wkv.weight",
                                          "layers.0.attn.kv_norm.weight",
                                          "layers.1.attn.wo_a.weight",
                                          "layers.2.attn.wo_b.weight",
                                          "layers.1.attn.attn_sink",
                                          "layers.1.attn.compressor.wkv.weight",
                                          "layers.1.attn.compressor.wgate.weight",
                                          "layers.1.attn.compressor.ape",
                                          "layers.1.attn.compressor.norm.weight",
                                          "layers.2.attn.compressor.wkv.weight",
                                          "layers.2.attn.compressor.wgate.weight",
                                          "layers.2.attn.compressor.ape",
                                          "layers.0.ffn.gate.weight",
                                          "layers.2.ffn.gate.weight",
                                          "layers.1.ffn.experts.2.w1.weight",
                                          "layers.1.ffn.experts.2.w2.weight",
                                          "layers.0.ffn.experts.1.w3.weight",
                                          "layers.2.ffn.shared_experts.w1.weight",
                                          "layers.2.ffn.shared_experts.w2.weight",
                                          "layers.0.ffn.shared_experts.w3.weight"};
  std::mt19937 rng(9);
  const double h = 1e-6;
  for (const std::string& name : names) {
    torch::Tensor p = model.find(name);
    ASSERT_TRUE(p.defined()) << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().norm().item<double>(), 0.0) << name << " gets no gradient";
    torch::Tensor flat = p.view(-1), gflat = p.grad().view(-1);
    // The largest entry of the gradient and two random ones, against its scale.
    const double scale = gflat.abs().max().item<double>();
    std::vector<int64_t> picks = {gflat.abs().argmax().item<int64_t>()};
    for (int k = 0; k < 2; ++k) picks.push_back(int64_t(rng() % uint64_t(flat.numel())));
    double worst = 0;
    for (int64_t i : picks) {
      torch::NoGradGuard no_grad;
      const double x0 = flat[i].item<double>();
      flat[i] = x0 + h;
      const double up = loss().item<double>();
      flat[i] = x0 - h;
      const double down = loss().item<double>();
      flat[i] = x0;
      const double fd = (up - down) / (2 * h), ad = gflat[i].item<double>();
      worst = std::max(worst, std::abs(fd - ad) / scale);
      EXPECT_NEAR(ad, fd, 1e-6 * scale + 1e-10) << name << "[" << i << "]";
    }
    std::printf("%-42s |autograd - fd| / max|grad| = %.2g\n", name.c_str(), worst);
  }
  // Frozen: the indexer (selection only) and the selection bias.
  for (const char* name : {"layers.1.attn.indexer.wq_b.weight", "layers.1.attn.indexer.weights_proj.weight",
                           "layers.1.attn.indexer.compressor.wkv.weight", "layers.1.ffn.gate.bias"}) {
    torch::Tensor p = model.find(name);
    ASSERT_TRUE(p.defined()) << name;
    EXPECT_FALSE(p.requires_grad()) << name;
    EXPECT_FALSE(p.grad().defined()) << name;
  }
}

// -- (d) AdamW -------------------------------------------------------------

std::vector<std::vector<int32_t>> fixed_batch(int64_t n_tokens) {
  testing::golden_set g = golden("tiny-a");
  std::vector<std::vector<int32_t>> rows;
  for (const auto& r : g.input_ids) rows.emplace_back(r.begin(), r.begin() + n_tokens);
  return rows;
}

TEST(training_trainer, adamw_step_lowers_loss_and_matches_hand_update) {
  auto model = load_model(data_dir("tiny-a"));
  ASSERT_TRUE(model);
  trainer_options opt;
  opt.lr = 1e-3;
  opt.weight_decay = 0.1;
  opt.max_grad_norm = 1.0;
  auto tr = trainer::create(model, opt).value();
  auto rows = fixed_batch(64);
  std::vector<std::vector<float>> mask(rows.size(), std::vector<float>(64, 1.0f));
  torch::Tensor p = model->find("layers.1.attn.wq_a.weight");
  torch::Tensor before = p.detach().clone();
  auto loss0 = tr->train_step(rows, mask);
  ASSERT_TRUE(loss0.ok()) << loss0.get_status().to_string();
  auto loss1 = tr->eval_loss(rows, mask);
  ASSERT_TRUE(loss1.ok());
  std::printf("loss %.6f -> %.6f, grad norm %.4f\n", loss0.value(), loss1.value(), tr->last_grad_norm());
  EXPECT_LT(loss1.value(), loss0.value() - 1e-3);

  // Clipping: the stored gradients have norm min(norm, max_grad_norm).
  double sq = 0;
  for (const auto& kv : model->named_parameters()) {
    if (kv.value().grad().defined()) sq += kv.value().grad().pow(2).sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(sq), std::min(tr->last_grad_norm(), opt.max_grad_norm), 1e-4);

  // AdamW's first step by hand: m = (1-b1) g, v = (1-b2) g², bias-corrected, decoupled decay.
  torch::Tensor g = p.grad().to(torch::kFloat64), p0 = before.to(torch::kFloat64);
  const double b1 = opt.beta1, b2 = opt.beta2;
  torch::Tensor m = (1 - b1) * g, v = (1 - b2) * g * g;
  torch::Tensor want = p0 * (1 - opt.lr * opt.weight_decay) -
                       (opt.lr / (1 - b1)) * m / (v.sqrt() / std::sqrt(1 - b2) + opt.eps);
  const double diff = (p.detach().to(torch::kFloat64) - want).abs().max().item<double>();
  const double moved = (p.detach().to(torch::kFloat64) - p0).abs().max().item<double>();
  EXPECT_LT(diff, 1e-7);
  EXPECT_GT(moved, 1e-4);
}

// The first `n_layers` layers of a fixture's model.
std::shared_ptr<v4_model> truncated_model(const std::string& name, int64_t n_layers) {
  model_config cfg = model_config_load(data_dir(name)).value();
  cfg.n_layers = n_layers;
  cfg.layer_kinds.resize(n_layers);
  cfg.layer_hash_moe.resize(n_layers);
  auto model = std::make_shared<v4_model>(cfg);
  EXPECT_TRUE(v4_model_load_weights(*model, data_dir(name)).ok());
  return model;
}

TEST(training_trainer, bf16_forward_trains_fp32_master_weights) {
  // NOTE(hart): tiny-b's first two layers (HCA, CSA; hash-routed): scored expert
  // top-k flips under bf16 rounding on these random weights (tiny-a: 28% logit
  // error over 6 layers), which would hide the arithmetic error being bounded.
  auto model = truncated_model("tiny-b", 2);
  testing::golden_set g = golden("tiny-b");
  std::vector<std::vector<int32_t>> rows = {{g.input_ids[0].begin(), g.input_ids[0].begin() + 300}};
  {
    torch::NoGradGuard no_grad;
    torch::Tensor ref = model->forward(ids_tensor(rows));
    model->set_compute_dtype(torch::kBFloat16);
    torch::Tensor low = model->forward(ids_tensor(rows));
    const double rel = ((low - ref).norm() / ref.norm()).item<double>();
    std::printf("bf16 forward relative error %.3g\n", rel);
    EXPECT_LT(rel, 4e-2);
    EXPECT_GT(rel, 1e-3);  // it really ran in bf16
  }
  trainer_options opt;
  opt.lr = 1e-3;
  opt.compute_dtype = torch::kBFloat16;
  auto tr = trainer::create(model, opt).value();
  std::vector<std::vector<float>> mask(rows.size(), std::vector<float>(300, 1.0f));
  auto l0 = tr->train_step(rows, mask);
  ASSERT_TRUE(l0.ok()) << l0.get_status().to_string();
  auto l1 = tr->eval_loss(rows, mask);
  ASSERT_TRUE(l1.ok());
  std::printf("bf16 training loss %.6f -> %.6f\n", l0.value(), l1.value());
  EXPECT_LT(l1.value(), l0.value());
  EXPECT_EQ(model->find("head.weight").scalar_type(), torch::kFloat32);
  EXPECT_EQ(model->compute_dtype(), torch::kBFloat16);
}

TEST(training_trainer, checkpoint_resume_continues_identically) {
  temp_dir tmp("resume");
  auto rows = fixed_batch(40);
  std::vector<std::vector<float>> mask(rows.size(), std::vector<float>(40, 1.0f));
  mask[1][20] = 0.0f;
  trainer_options opt;
  opt.lr = 1e-3;
  auto a_model = load_model(data_dir("tiny-a"));
  auto a = trainer::create(a_model, opt).value();
  ASSERT_TRUE(a->train_step(rows, mask).ok());
  ASSERT_TRUE(a->save(tmp / "ckpt", data_dir("tiny-a")).ok());
  auto b_model = load_model(data_dir("tiny-a"));
  auto b = trainer::create(b_model, opt).value();
  ASSERT_TRUE(b->load(tmp / "ckpt").ok());
  EXPECT_EQ(b->step(), 1);
  ASSERT_TRUE(a->train_step(rows, mask).ok());
  ASSERT_TRUE(b->train_step(rows, mask).ok());
  double worst = 0;
  for (const auto& kv : a_model->named_parameters()) {
    worst = std::max(worst, (kv.value() - b_model->find(kv.key())).abs().max().item<double>());
  }
  EXPECT_EQ(worst, 0.0);
}

TEST(training_trainer, bad_batches_are_errors) {
  auto model = load_model(data_dir("tiny-a"));
  ASSERT_TRUE(model);
  auto tr = trainer::create(model, trainer_options{}).value();
  const std::vector<std::vector<float>> mask2 = {{1, 1, 1}};
  auto s = tr->train_step({{1, 2, 512}}, mask2);
  EXPECT_EQ(s.get_status().code(), status_code::out_of_range);
  s = tr->train_step({{1, 2, 3}, {1, 2}}, {{1, 1, 1}, {1, 1}});
  EXPECT_EQ(s.get_status().code(), status_code::invalid_argument);
  s = tr->train_step({{1, 2, 3}}, {{1, 0, 0}});
  EXPECT_EQ(s.get_status().code(), status_code::invalid_argument);
  trainer_options bad;
  bad.lr = -1;
  EXPECT_EQ(trainer::create(model, bad).get_status().code(), status_code::invalid_argument);
  model->to(torch::kFloat64);
  EXPECT_EQ(trainer::create(model, trainer_options{}).get_status().code(), status_code::invalid_argument);
}

// -- (e) save -> hart::engine::load ------------------------------------------

TEST(training_checkpoint, saved_dirs_load_in_the_engine) {
  torch::NoGradGuard no_grad;
  temp_dir tmp("save");
  auto model = load_model(data_dir("tiny-a"));
  ASSERT_TRUE(model);
  auto rows = fixed_batch(100);
  ASSERT_TRUE(v4_model_save(*model, tmp / "f32", torch::kFloat32, data_dir("tiny-a")).ok());
  EXPECT_TRUE(fs::exists(tmp / "f32/tokenizer.json"));
  auto orig = engine_logits(data_dir("tiny-a"), rows), saved = engine_logits(tmp / "f32", rows);
  for (size_t b = 0; b < rows.size(); ++b) EXPECT_EQ(orig[b], saved[b]) << "row " << b;

  ASSERT_TRUE(v4_model_save(*model, tmp / "bf16", torch::kBFloat16, data_dir("tiny-a")).ok());
  auto low = load_model(tmp / "bf16");
  ASSERT_TRUE(low);
  torch::Tensor h = model->find("head.weight");
  EXPECT_TRUE(torch::equal(low->find("head.weight"), h.to(torch::kBFloat16).to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(low->find("layers.0.ffn.gate.tid2eid"), model->find("layers.0.ffn.gate.tid2eid")));
  torch::Tensor logits = low->forward(ids_tensor(rows));
  auto want = engine_logits(tmp / "bf16", rows);
  for (size_t b = 0; b < rows.size(); ++b) {
    const double err = max_rel_error(row_floats(logits, int64_t(b)), want[b], model->config().vocab_size);
    std::printf("bf16 checkpoint row %zu: max relative error vs engine %.3g\n", b, err);
    EXPECT_LE(err, 1e-4);
  }
}

TEST(training_checkpoint, mismatched_checkpoint_is_an_error) {
  auto cfg = model_config_load(data_dir("tiny-c"));
  ASSERT_TRUE(cfg.ok());
  v4_model model(cfg.value());
  status s = v4_model_load_weights(model, data_dir("tiny-a"));
  EXPECT_STATUS(s, status_code::invalid_argument, "has shape");
  EXPECT_EQ(v4_model_load(data_dir("no-such-model")).get_status().code(), status_code::not_found);
}

}  // namespace
}  // namespace hart::training
