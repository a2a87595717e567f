// Bad checkpoints and bad requests give a clear status naming the problem,
// never a crash, and leave every sequence as it was. Also: FP8 and MXFP4
// checkpoints load to exactly the weights their codes stand for.
#include "kernels/quant/quant.h"
#include "runtime/model/engine.h"
#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hart {
namespace {

namespace fs = std::filesystem;

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";
const std::string k_tiny_b = std::string(HART_TEST_DATA) + "/tiny-b";

// The status is an error whose message contains every needle.
void expect_error(const status& s, std::initializer_list<std::string> needles,
                  status_code code = status_code::ok) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << *needles.begin() << "'";
  for (const std::string& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message '" << s.message() << "' lacks '" << n << "'";
  }
  if (code != status_code::ok) {
    EXPECT_EQ(s.code(), code) << s.to_string();
  }
}

// A checkpoint tensor held in memory.
struct owned_tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::vector<owned_tensor> read_checkpoint(const std::string& dir) {
  std::vector<owned_tensor> out;
  status_or<weight_store> store = weight_store::open(dir);
  EXPECT_TRUE(store.ok()) << store.get_status().to_string();
  if (!store.ok()) return out;
  for (const std::string& n : store->names()) {
    const tensor_entry* e = store->find(n);
    out.push_back({e->name, e->type, e->shape, std::vector<uint8_t>(e->data, e->data + e->n_bytes)});
  }
  return out;
}

owned_tensor* find_tensor(std::vector<owned_tensor>& ts, const std::string& name) {
  for (owned_tensor& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "fixture lacks tensor " << name;
  return nullptr;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void copy_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  ASSERT_FALSE(ec) << from << " -> " << to << ": " << ec.message();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Exact decoders, written independently of kernels/quant.
float e4m3_value(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  const float mag =
      exp == 0 ? std::ldexp(float(man) / 8.0f, -6) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}
float e2m1_value(uint8_t nibble) {
  static constexpr float k_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = k_mag[nibble & 7];
  return (nibble & 8) ? -mag : mag;
}
float e8m0_value(uint8_t b) {
  return std::ldexp(1.0f, int(b) - 127);
}

std::vector<int32_t> test_tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 5) % 512;
  return t;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

class engine_errors_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hart_engine_errors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    base_ = new std::vector<owned_tensor>(read_checkpoint(k_tiny_a));
    status_or<std::unique_ptr<engine>> e = engine::load(params(k_tiny_a));
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    tiny_a_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() {
    delete tiny_a_;
    tiny_a_ = nullptr;
    delete base_;
    base_ = nullptr;
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  void SetUp() override {
    ASSERT_NE(tiny_a_, nullptr);
    ASSERT_NE(base_, nullptr);
    ASSERT_GT(base_->size(), 100u);
  }

  static engine_params params(const std::string& dir) {
    engine_params p;
    p.model_dir = dir;
    p.prec = precision::exact;
    return p;
  }

  // A fresh model dir holding tiny-a's config and tokenizer files (no weights).
  static std::string model_dir(const std::string& name) {
    const std::string d = tmp_ + "/" + name;
    fs::create_directories(d);
    for (const char* f :
         {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      copy_file(k_tiny_a + "/" + f, d + "/" + f);
    }
    return d;
  }

  static void write_checkpoint(const std::string& dir, const std::vector<owned_tensor>& ts) {
    std::vector<tensor_to_write> tw;
    for (const owned_tensor& t : ts) tw.push_back({t.name, t.type, t.shape, t.bytes.data(), t.bytes.size()});
    status s = safetensors_write(dir + "/model.safetensors", tw, {{"format", "pt"}});
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  // tiny-a with `edit` applied to its tensors; returns engine::load's status.
  static status load_edited(const std::string& name,
                            const std::function<void(std::vector<owned_tensor>&)>& edit) {
    const std::string d = model_dir(name);
    std::vector<owned_tensor> ts = *base_;
    edit(ts);
    write_checkpoint(d, ts);
    return engine::load(params(d)).get_status();
  }

  // Full-sequence logits [vocab, T] of one fresh sequence.
  static std::vector<float> all_logits(const engine& e, const std::vector<int32_t>& tokens) {
    sequence_state s = e.new_sequence();
    std::vector<float> logits;
    status st = e.prefill(s, tokens, logits_request::all, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(logits.size(), tokens.size() * size_t(e.config().vocab_size));
    return logits;
  }

  static std::string tmp_;
  static std::vector<owned_tensor>* base_;
  static engine* tiny_a_;
};

std::string engine_errors_test::tmp_;
std::vector<owned_tensor>* engine_errors_test::base_ = nullptr;
engine* engine_errors_test::tiny_a_ = nullptr;

// -- bad checkpoints ---------------------------------------------------------

TEST_F(engine_errors_test, truncated_checkpoint) {
  const std::string d = model_dir("truncated");
  const std::string bytes = read_text(k_tiny_a + "/model.safetensors");
  ASSERT_GT(bytes.size(), 1000u);
  write_text(d + "/model.safetensors", bytes.substr(0, bytes.size() - 1000));
  expect_error(engine::load(params(d)).get_status(), {d + "/model.safetensors", "truncated"});
}

TEST_F(engine_errors_test, wrong_shape) {
  status s = load_edited("wrong_shape", [](std::vector<owned_tensor>& ts) {
    owned_tensor* t = find_tensor(ts, "model.layers.2.attn.wq_b.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->shape, (std::vector<int64_t>{256, 64}));
    std::vector<uint8_t> src = t->bytes;
    const float* a = reinterpret_cast<const float*>(src.data());
    for (int64_t r = 0; r < 256; ++r) {
      for (int64_t c = 0; c < 64; ++c) t->f32()[c * 256 + r] = a[r * 64 + c];
    }
    t->shape = {64, 256};
  });
  expect_error(s, {"layers.2.attn.wq_b.weight", "[64, 256]", "[256, 64]"}, status_code::invalid_argument);
}

TEST_F(engine_errors_test, wrong_dtype) {
  status s = load_edited("wrong_dtype", [](std::vector<owned_tensor>& ts) {
    owned_tensor* t = find_tensor(ts, "model.layers.1.attn.wq_a.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, dtype::f32);
    std::vector<uint8_t> out(t->numel() * 8);
    for (int64_t i = 0; i < t->numel(); ++i) {
      const int64_t v = int64_t(std::lround(t->f32()[i] * 1000.0f));
      std::memcpy(out.data() + i * 8, &v, 8);
    }
    t->type = dtype::i64;
    t->bytes = std::move(out);
  });
  expect_error(s, {"layers.1.attn.wq_a.weight", "I64"});
}

TEST_F(engine_errors_test, missing_tensor) {
  status s = load_edited("missing_tensor", [](std::vector<owned_tensor>& ts) {
    const size_t before = ts.size();
    ts.erase(std::remove_if(
                 ts.begin(), ts.end(),
                 [](const owned_tensor& t) { return t.name == "model.layers.3.ffn.experts.5.w1.weight"; }),
             ts.end());
    ASSERT_EQ(ts.size(), before - 1);
  });
  expect_error(s, {"layers.3.ffn.experts.5.w1.weight"}, status_code::not_found);
}

TEST_F(engine_errors_test, tid2eid_expert_out_of_range) {
  status s = load_edited("tid2eid_99", [](std::vector<owned_tensor>& ts) {
    owned_tensor* t = find_tensor(ts, "model.layers.0.ffn.gate.tid2eid");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, dtype::i64);
    const int64_t bad = 99;
    std::memcpy(t->bytes.data() + 8 * 301, &bad, 8);
  });
  expect_error(s, {"tid2eid", "99"});
}

// An I64 expert id must not be narrowed to int32 before the range check:
// 2^32 + 3 is not expert 3.
TEST_F(engine_errors_test, tid2eid_expert_id_past_int32) {
  status s = load_edited("tid2eid_wide", [](std::vector<owned_tensor>& ts) {
    owned_tensor* t = find_tensor(ts, "model.layers.0.ffn.gate.tid2eid");
    ASSERT_NE(t, nullptr);
    const int64_t bad = (int64_t{1} << 32) + 3;
    std::memcpy(t->bytes.data() + 8 * 17, &bad, 8);
  });
  expect_error(s, {"tid2eid"});
}

TEST_F(engine_errors_test, unknown_layer_type_in_config) {
  const std::string d = model_dir("bad_config");
  std::string cfg = read_text(d + "/config.json");
  const size_t pos = cfg.find("\"heavily_compressed_attention\",");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, std::string("\"heavily_compressed_attention\"").size(), "\"foo_attention\"");
  write_text(d + "/config.json", cfg);
  fs::create_symlink(k_tiny_a + "/model.safetensors", d + "/model.safetensors");
  expect_error(engine::load(params(d)).get_status(), {"foo_attention", "config.json"},
               status_code::invalid_argument);
}

TEST_F(engine_errors_test, empty_checkpoint_dir) {
  const std::string d = tmp_ + "/empty";
  fs::create_directories(d);
  expect_error(engine::load(params(d)).get_status(), {d}, status_code::not_found);
  // A config but no weights.
  const std::string c = model_dir("config_only");
  expect_error(engine::load(params(c)).get_status(), {c, "model.safetensors"}, status_code::not_found);
  // No directory at all.
  expect_error(engine::load(params("")).get_status(), {"model_dir"}, status_code::invalid_argument);
}

// -- bad requests ------------------------------------------------------------

TEST_F(engine_errors_test, token_out_of_vocabulary_changes_nothing) {
  const engine& e = *tiny_a_;
  ASSERT_EQ(e.config().vocab_size, 512);
  const std::vector<int32_t> good = test_tokens(24);
  const std::vector<float> fresh = all_logits(e, good);

  sequence_state s = e.new_sequence();
  std::vector<float> logits = {1.0f, 2.0f};
  for (int32_t bad : {512, -1}) {
    std::vector<int32_t> toks = good;
    toks[7] = bad;
    expect_error(e.prefill(s, toks, logits_request::all, &logits), {std::to_string(bad)},
                 status_code::out_of_range);
    EXPECT_EQ(s.n_tokens, 0);
  }
  // Also when the bad item is second in a batch: the first sequence stays untouched.
  sequence_state other = e.new_sequence();
  std::vector<int32_t> bad_toks = good;
  bad_toks.back() = 512;
  expect_error(e.forward({batch_item{&other, good, logits_request::last},
                          batch_item{&s, bad_toks, logits_request::last}},
                         &logits),
               {"512"}, status_code::out_of_range);
  EXPECT_EQ(other.n_tokens, 0);
  EXPECT_EQ(s.n_tokens, 0);
  // A decode step with a bad token.
  expect_error(e.decode({&other, &s}, {3, 512}, &logits), {"512"}, status_code::out_of_range);
  EXPECT_EQ(other.n_tokens, 0);
  EXPECT_EQ(s.n_tokens, 0);

  ASSERT_TRUE(e.prefill(s, good, logits_request::all, &logits).ok());
  EXPECT_EQ(s.n_tokens, int64_t(good.size()));
  EXPECT_EQ(logits, fresh);
  std::vector<float> other_logits;
  ASSERT_TRUE(e.prefill(other, good, logits_request::all, &other_logits).ok());
  EXPECT_EQ(other_logits, fresh);
}

TEST_F(engine_errors_test, empty_tokens) {
  const engine& e = *tiny_a_;
  sequence_state s = e.new_sequence();
  std::vector<float> logits;
  expect_error(e.prefill(s, {}, logits_request::last, &logits), {"empty"}, status_code::invalid_argument);
  EXPECT_EQ(s.n_tokens, 0);
  expect_error(e.forward({}, &logits), {"empty"}, status_code::invalid_argument);
  expect_error(e.decode({}, {}, &logits), {"empty"}, status_code::invalid_argument);
}

TEST_F(engine_errors_test, same_sequence_twice_in_a_batch) {
  const engine& e = *tiny_a_;
  sequence_state s = e.new_sequence();
  std::vector<float> logits;
  expect_error(
      e.forward({batch_item{&s, {1, 2, 3}, logits_request::last}, batch_item{&s, {4}, logits_request::last}},
                &logits),
      {"repeats"}, status_code::invalid_argument);
  EXPECT_EQ(s.n_tokens, 0);
  expect_error(e.decode({&s, &s}, {5, 6}, &logits), {"repeats"}, status_code::invalid_argument);
  EXPECT_EQ(s.n_tokens, 0);
}

TEST_F(engine_errors_test, null_sequence) {
  std::vector<float> logits;
  expect_error(tiny_a_->forward({batch_item{nullptr, {1}, logits_request::last}}, &logits), {"no sequence"},
               status_code::invalid_argument);
  expect_error(tiny_a_->decode({nullptr}, {1}, &logits), {"no sequence"}, status_code::invalid_argument);
}

TEST_F(engine_errors_test, decode_size_mismatch) {
  const engine& e = *tiny_a_;
  sequence_state a = e.new_sequence(), b = e.new_sequence();
  std::vector<float> logits;
  expect_error(e.decode({&a, &b}, {1}, &logits), {"2 sequences", "1 tokens"}, status_code::invalid_argument);
  expect_error(e.decode({&a}, {1, 2}, &logits), {"1 sequences", "2 tokens"}, status_code::invalid_argument);
  EXPECT_EQ(a.n_tokens, 0);
  EXPECT_EQ(b.n_tokens, 0);
}

TEST_F(engine_errors_test, sequence_from_another_engine) {
  status_or<std::unique_ptr<engine>> b = engine::load(params(k_tiny_b));
  ASSERT_TRUE(b.ok()) << b.get_status().to_string();
  ASSERT_NE(b.value()->config().n_layers, tiny_a_->config().n_layers);
  sequence_state sb = b.value()->new_sequence();
  std::vector<float> logits;
  expect_error(tiny_a_->prefill(sb, {1, 2, 3}, logits_request::last, &logits), {"not made by this engine"},
               status_code::invalid_argument);
  EXPECT_EQ(sb.n_tokens, 0);
  sequence_state sa = tiny_a_->new_sequence();
  expect_error(b.value()->decode({&sa}, {1}, &logits), {"not made by this engine"},
               status_code::invalid_argument);
  EXPECT_EQ(sa.n_tokens, 0);
  // A default-constructed sequence has no layer state either.
  sequence_state blank;
  expect_error(tiny_a_->prefill(blank, {1}, logits_request::last, &logits), {"not made by this engine"});
}

TEST_F(engine_errors_test, past_max_position) {
  const engine& e = *tiny_a_;
  const int64_t max_pos = e.config().max_position;
  ASSERT_GT(max_pos, 0);
  sequence_state s = e.new_sequence();
  s.n_tokens = max_pos - 1;
  std::vector<float> logits;
  expect_error(e.prefill(s, {1, 2}, logits_request::last, &logits),
               {std::to_string(max_pos + 1), "max_position"}, status_code::out_of_range);
  EXPECT_EQ(s.n_tokens, max_pos - 1);
}

// -- quantized checkpoints ---------------------------------------------------

// Produces the stored codes and scale of one fp32 weight, and the fp32 values
// those codes stand for (decoded independently of the loader).
using quantizer = std::function<void(const owned_tensor& w, owned_tensor* codes, owned_tensor* scale,
                                     std::vector<float>* dequantized)>;

class quantized_checkpoint_test : public engine_errors_test {
 protected:
  // Writes tiny-a twice: `quantized` with every tensor `pick` selects replaced
  // by its codes + `<name minus .weight>.scale`, and `reference` with those
  // tensors replaced by the fp32 values the codes stand for. Returns the number
  // of tensors replaced.
  static int write_pair(const std::string& quantized, const std::string& reference,
                        const std::function<bool(const owned_tensor&)>& pick, const quantizer& quantize) {
    std::vector<owned_tensor> q_ts, r_ts;
    int n = 0;
    for (const owned_tensor& t : *base_) {
      if (!pick(t)) {
        q_ts.push_back(t);
        r_ts.push_back(t);
        continue;
      }
      EXPECT_EQ(t.type, dtype::f32) << t.name;
      EXPECT_EQ(t.shape.size(), 2u) << t.name;
      const std::string stem = t.name.substr(0, t.name.size() - std::string(".weight").size());
      owned_tensor codes{t.name, dtype::f32, {}, {}};
      owned_tensor scale{stem + ".scale", dtype::e8m0, {}, {}};
      std::vector<float> deq(t.numel());
      quantize(t, &codes, &scale, &deq);
      owned_tensor ref{t.name, dtype::f32, t.shape, std::vector<uint8_t>(t.bytes.size())};
      std::memcpy(ref.bytes.data(), deq.data(), ref.bytes.size());
      // The codes must differ from the fp32 weight, or the test proves nothing.
      EXPECT_NE(ref.bytes, t.bytes) << t.name;
      q_ts.push_back(std::move(codes));
      q_ts.push_back(std::move(scale));
      r_ts.push_back(std::move(ref));
      ++n;
    }
    write_checkpoint(quantized, q_ts);
    write_checkpoint(reference, r_ts);
    return n;
  }

  // Loads both checkpoints in exact precision; their full-sequence logits must
  // agree, and differ from the unquantized tiny-a's.
  static void expect_same_logits(const std::string& quantized, const std::string& reference) {
    status_or<std::unique_ptr<engine>> q = engine::load(params(quantized));
    ASSERT_TRUE(q.ok()) << q.get_status().to_string();
    status_or<std::unique_ptr<engine>> r = engine::load(params(reference));
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    EXPECT_EQ(q.value()->n_params(), r.value()->n_params());
    EXPECT_EQ(q.value()->n_params(), tiny_a_->n_params());
    const std::vector<int32_t> tokens = test_tokens(40);
    const std::vector<float> lq = all_logits(*q.value(), tokens);
    const std::vector<float> lr = all_logits(*r.value(), tokens);
    const std::vector<float> l0 = all_logits(*tiny_a_, tokens);
    ASSERT_EQ(lq.size(), lr.size());
    ASSERT_EQ(lq.size(), l0.size());
    const double err = rel_err(lq, lr);
    EXPECT_LE(err, 1e-5) << "quantized checkpoint vs its dequantized fp32 copy";
    double max_err = 0;
    for (size_t i = 0; i < lq.size(); ++i) {
      max_err = std::max(max_err, std::fabs(double(lq[i]) - lr[i]) / std::max(1.0, std::fabs(double(lr[i]))));
    }
    EXPECT_LE(max_err, 1e-5);
    EXPECT_GT(rel_err(lq, l0), 1e-4) << "quantization should move the logits away from the fp32 model";
  }
};

TEST_F(quantized_checkpoint_test, fp8_block_weights) {
  const std::string qd = model_dir("fp8"), rd = model_dir("fp8_ref");
  auto pick = [](const owned_tensor& t) {
    return t.shape.size() == 2 && (ends_with(t.name, ".wq_a.weight") || ends_with(t.name, ".wq_b.weight") ||
                                   ends_with(t.name, ".wkv.weight") || ends_with(t.name, ".wo_b.weight"));
  };
  const int n = write_pair(
      qd, rd, pick,
      [](const owned_tensor& w, owned_tensor* codes, owned_tensor* scale, std::vector<float>* deq) {
        const int64_t rows = w.shape[0], cols = w.shape[1];
        const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
        codes->type = dtype::e4m3;
        codes->shape = w.shape;
        codes->bytes.resize(rows * cols);
        scale->shape = {srows, scols};
        scale->bytes.resize(srows * scols);
        status s = fp8_block_quantize(reinterpret_cast<const float*>(w.bytes.data()), rows, cols, 128,
                                      codes->bytes.data(), scale->bytes.data());
        ASSERT_TRUE(s.ok()) << s.to_string();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            (*deq)[r * cols + c] = e4m3_value(codes->bytes[r * cols + c]) *
                                   e8m0_value(scale->bytes[(r / 128) * scols + c / 128]);
          }
        }
      });
  // 6 layers × (wq_a, wq_b, wkv, wo_b) + CSA/HCA compressor wkv (4) + indexer wq_b and compressor wkv (2 ×
  // 2).
  EXPECT_EQ(n, 6 * 4 + 4 + 2 * 2);
  expect_same_logits(qd, rd);
}

TEST_F(quantized_checkpoint_test, mxfp4_routed_experts) {
  const std::string qd = model_dir("mxfp4"), rd = model_dir("mxfp4_ref");
  auto pick = [](const owned_tensor& t) {
    return t.name.find(".ffn.experts.") != std::string::npos && ends_with(t.name, ".weight");
  };
  const int n = write_pair(
      qd, rd, pick,
      [](const owned_tensor& w, owned_tensor* codes, owned_tensor* scale, std::vector<float>* deq) {
        const int64_t rows = w.shape[0], cols = w.shape[1];
        ASSERT_EQ(cols % 32, 0);
        codes->type = dtype::i8;
        codes->shape = {rows, cols / 2};
        codes->bytes.resize(rows * cols / 2);
        scale->shape = {rows, cols / 32};
        scale->bytes.resize(rows * cols / 32);
        status s = mxfp4_quantize(reinterpret_cast<const float*>(w.bytes.data()), rows, cols,
                                  codes->bytes.data(), scale->bytes.data());
        ASSERT_TRUE(s.ok()) << s.to_string();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const uint8_t byte = codes->bytes[r * (cols / 2) + c / 2];
            const uint8_t nibble = (c % 2 == 0) ? (byte & 15) : (byte >> 4);  // low nibble = even column
            (*deq)[r * cols + c] = e2m1_value(nibble) * e8m0_value(scale->bytes[r * (cols / 32) + c / 32]);
          }
        }
      });
  EXPECT_EQ(n, 6 * 8 * 3);  // 6 layers × 8 experts × (w1, w2, w3)
  expect_same_logits(qd, rd);
}

TEST_F(quantized_checkpoint_test, fp8_weight_without_scale) {
  // An F8_E4M3 weight whose `.scale` is missing is an error naming both.
  status s = load_edited("fp8_no_scale", [](std::vector<owned_tensor>& ts) {
    owned_tensor* t = find_tensor(ts, "model.layers.1.attn.wq_a.weight");
    ASSERT_NE(t, nullptr);
    std::vector<uint8_t> codes(t->numel()), sc(1);
    ASSERT_TRUE(fp8_block_quantize(t->f32(), t->shape[0], t->shape[1], 128, codes.data(), sc.data()).ok());
    t->type = dtype::e4m3;
    t->bytes = codes;
  });
  expect_error(s, {"layers.1.attn.wq_a.weight", "layers.1.attn.wq_a.scale"}, status_code::not_found);
}

}  // namespace
}  // namespace hart
