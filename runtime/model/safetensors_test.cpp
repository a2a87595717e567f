#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

namespace fs = std::filesystem;

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with `header` as its JSON and `data_bytes` zero bytes of data; the
// length prefix is `header.size()` unless `header_len` overrides it.
std::string raw_file(const std::string& header, size_t data_bytes, int64_t header_len = -1) {
  uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_bytes, '\0');
}

// The status is an error whose message contains every needle.
void expect_error(const status& s, std::initializer_list<const char*> needles,
                  status_code code = status_code::ok) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << *needles.begin() << "'";
  for (const char* n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message '" << s.message() << "' lacks '" << n << "'";
  }
  if (code != status_code::ok) {
    EXPECT_EQ(s.code(), code) << s.to_string();
  }
}

class safetensors_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hart_safetensors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Writes a raw file and returns safetensors_file::open's status.
  status open_raw(const std::string& name, const std::string& bytes) {
    write_bytes(path(name), bytes);
    return safetensors_file::open(path(name)).get_status();
  }

  // Writes a shard holding each named tensor as F32 [3] = {1, 2, 3}.
  void write_shard(const std::string& name, const std::vector<std::string>& tensors) {
    std::vector<float> data = {1.f, 2.f, 3.f};
    std::vector<tensor_to_write> tw;
    for (const auto& t : tensors) tw.push_back({t, dtype::f32, {3}, data.data(), 12});
    ASSERT_TRUE(safetensors_write(path(name), tw).ok());
  }

  std::string dir_;
};

// -- tensor_entry -------------------------------------------------------------

TEST(tensor_entry_test, numel_and_shape_string) {
  tensor_entry e;
  EXPECT_EQ(e.numel(), 1);
  EXPECT_EQ(e.shape_string(), "[]");
  e.shape = {512, 128};
  EXPECT_EQ(e.numel(), 512 * 128);
  EXPECT_EQ(e.shape_string(), "[512, 128]");
  e.shape = {4, 0, 3};
  EXPECT_EQ(e.numel(), 0);
}

// -- reading the real fixture -------------------------------------------------

TEST(safetensors_fixture_test, opens_tiny_a) {
  auto sf = safetensors_file::open(k_tiny_a + "/model.safetensors");
  ASSERT_TRUE(sf.ok()) << sf.get_status().to_string();
  const safetensors_file& f = **sf;
  EXPECT_EQ(f.tensors().size(), 304u);
  EXPECT_EQ(f.metadata().at("format"), "pt");

  const tensor_entry* emb = f.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, dtype::f32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 128}));
  EXPECT_EQ(emb->n_bytes, 512u * 128 * 4);
  EXPECT_EQ(emb->file, k_tiny_a + "/model.safetensors");
  float v[2];
  std::memcpy(v, emb->data, sizeof(v));
  EXPECT_FLOAT_EQ(v[0], -0.10481858998537064f);
  EXPECT_FLOAT_EQ(v[1], 0.06652800738811493f);

  const tensor_entry* tid = f.find("model.layers.0.ffn.gate.tid2eid");
  ASSERT_NE(tid, nullptr);
  EXPECT_EQ(tid->type, dtype::i64);
  EXPECT_EQ(tid->shape_string(), "[512, 2]");
  int64_t ids[512 * 2];
  std::memcpy(ids, tid->data, sizeof(ids));
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 6);
  for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < 8);  // n_routed_experts = 8

  EXPECT_EQ(f.find("model.no_such_tensor"), nullptr);
  EXPECT_EQ(f.find(""), nullptr);
}

TEST(safetensors_fixture_test, store_prefers_model_safetensors) {
  // tiny-a also holds golden.safetensors; model.safetensors wins without an index.
  auto ws = weight_store::open(k_tiny_a);
  ASSERT_TRUE(ws.ok()) << ws.get_status().to_string();
  EXPECT_EQ(ws->size(), 304u);
  std::vector<std::string> names = ws->names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  const tensor_entry* e = ws->find(std::string_view("model.embed_tokens.weight"));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape_string(), "[512, 128]");
  EXPECT_EQ(ws->find("nope"), nullptr);
}

// -- writer round trip --------------------------------------------------------

TEST_F(safetensors_test, write_read_round_trip) {
  std::vector<float> f32 = {1.5f, -2.f, 3.25f, 0.f, 7.f, -8.f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x4000};
  std::vector<int64_t> i64 = {-1, 0, 1ll << 40, 42};
  std::vector<uint8_t> e4m3 = {0x38, 0x7e, 0x00, 0xb8, 0x40};
  std::vector<uint8_t> fp4 = {0x21, 0x43, 0x65, 0x87};  // shape [2, 2] of packed pairs
  std::vector<uint8_t> flags = {1, 0, 1};
  int32_t scalar = 12345;
  std::vector<tensor_to_write> tw = {
      {"w.f32", dtype::f32, {2, 3}, f32.data(), 24},   {"w.bf16", dtype::bf16, {3}, bf16.data(), 6},
      {"w.i64", dtype::i64, {4}, i64.data(), 32},      {"w.e4m3", dtype::e4m3, {5}, e4m3.data(), 5},
      {"w.fp4", dtype::e2m1x2, {2, 2}, fp4.data(), 4}, {"w.bool", dtype::boolean, {3}, flags.data(), 3},
      {"w.scalar", dtype::i32, {}, &scalar, 4},        {"w.empty", dtype::f16, {0, 7}, nullptr, 0},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round \"trip\""}};
  const std::string p = path("rt.safetensors");
  ASSERT_TRUE(safetensors_write(p, tw, meta).ok());
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  // Header length keeps the data section 8-byte aligned.
  std::string bytes = read_bytes(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  auto sf = safetensors_file::open(p);
  ASSERT_TRUE(sf.ok()) << sf.get_status().to_string();
  EXPECT_EQ((*sf)->metadata(), meta);
  ASSERT_EQ((*sf)->tensors().size(), tw.size());
  for (const tensor_to_write& t : tw) {
    const tensor_entry* e = (*sf)->find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->type, t.type) << t.name;
    EXPECT_EQ(e->shape, t.shape) << t.name;
    ASSERT_EQ(e->n_bytes, t.n_bytes) << t.name;
    if (t.n_bytes) {
      EXPECT_EQ(std::memcmp(e->data, t.data, t.n_bytes), 0) << t.name;
    }
  }
  EXPECT_EQ((*sf)->find("w.scalar")->numel(), 1);
  EXPECT_EQ((*sf)->find("w.empty")->numel(), 0);
}

TEST_F(safetensors_test, write_rejects_bad_input) {
  std::vector<float> d = {1.f, 2.f};
  expect_error(safetensors_write(path("a.safetensors"), {{"w", dtype::f32, {3}, d.data(), 8}}),
               {"'w'", "n_bytes 8", "[3]", "F32", "12"});
  expect_error(safetensors_write(path("a.safetensors"),
                                 {{"w", dtype::f32, {1}, d.data(), 4}, {"w", dtype::f32, {1}, d.data(), 4}}),
               {"'w'", "twice"});
  expect_error(safetensors_write(path("a.safetensors"), {{"w", dtype::f32, {-1}, d.data(), 4}}),
               {"'w'", "negative"});
  expect_error(
      safetensors_write(path("a.safetensors"), {{"big", dtype::f32, {1ll << 40, 1ll << 40}, d.data(), 4}}),
      {"'big'", "overflow"});
  expect_error(safetensors_write(path("a.safetensors"), {{"__metadata__", dtype::f32, {1}, d.data(), 4}}),
               {"__metadata__"});
  expect_error(safetensors_write(path("missing_dir/a.safetensors"), {{"w", dtype::f32, {1}, d.data(), 4}}),
               {"missing_dir"});
  EXPECT_FALSE(fs::exists(path("a.safetensors")));
  EXPECT_FALSE(fs::exists(path("a.safetensors.tmp")));
}

// -- sharded checkpoints ------------------------------------------------------

TEST_F(safetensors_test, sharded_checkpoint_opens) {
  write_shard("model-00001-of-00002.safetensors", {"a.weight", "b.weight"});
  write_shard("model-00002-of-00002.safetensors", {"c.weight"});
  write_bytes(path("model.safetensors.index.json"),
              R"({"metadata": {"total_size": 36}, "weight_map": {
                    "a.weight": "model-00001-of-00002.safetensors",
                    "b.weight": "model-00001-of-00002.safetensors",
                    "c.weight": "model-00002-of-00002.safetensors"}})");
  // A stray single file is ignored once an index exists.
  write_shard("model.safetensors", {"stray"});
  auto ws = weight_store::open(dir_);
  ASSERT_TRUE(ws.ok()) << ws.get_status().to_string();
  EXPECT_EQ(ws->names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight"}));
  const tensor_entry* c = ws->find("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->file, path("model-00002-of-00002.safetensors"));
  float v[3];
  std::memcpy(v, c->data, sizeof(v));
  EXPECT_EQ(v[2], 3.f);
  EXPECT_EQ(ws->find("stray"), nullptr);

  // The store stays valid after a move (entries live in the shared files).
  weight_store moved = std::move(ws.value());
  EXPECT_EQ(moved.find("a.weight")->shape_string(), "[3]");
}

TEST_F(safetensors_test, single_file_path_and_lone_file_in_dir) {
  write_shard("weights.safetensors", {"x"});
  auto by_file = weight_store::open(path("weights.safetensors"));
  ASSERT_TRUE(by_file.ok()) << by_file.get_status().to_string();
  EXPECT_EQ(by_file->size(), 1u);
  auto by_dir = weight_store::open(dir_);
  ASSERT_TRUE(by_dir.ok()) << by_dir.get_status().to_string();
  EXPECT_NE(by_dir->find("x"), nullptr);
}

// -- header errors ------------------------------------------------------------

TEST_F(safetensors_test, empty_file) {
  expect_error(open_raw("empty.safetensors", ""), {"empty.safetensors", "truncated"}, status_code::data_loss);
}

TEST_F(safetensors_test, seven_byte_file) {
  expect_error(open_raw("seven.safetensors", std::string(7, '\x01')), {"seven.safetensors", "7 bytes"},
               status_code::data_loss);
}

TEST_F(safetensors_test, header_length_beyond_file) {
  expect_error(open_raw("h.safetensors", raw_file("{}", 0, 4096)), {"h.safetensors", "header length 4096"},
               status_code::data_loss);
}

TEST_F(safetensors_test, header_length_over_limit) {
  expect_error(open_raw("h.safetensors", raw_file("{}", 0, 1ll << 40)), {"h.safetensors", "limit"});
}

TEST_F(safetensors_test, non_json_header) {
  expect_error(open_raw("bad.safetensors", raw_file("{\"w\": [not json", 0)), {"bad.safetensors", "JSON"});
  expect_error(open_raw("arr.safetensors", raw_file("[1, 2]", 0)), {"arr.safetensors", "object"});
  expect_error(open_raw("meta.safetensors", raw_file(R"({"__metadata__": {"k": 1}})", 0)),
               {"meta.safetensors", "'k'"});
}

TEST_F(safetensors_test, unknown_dtype) {
  expect_error(open_raw("d.safetensors",
                        raw_file(R"({"w.q": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", 2)),
               {"d.safetensors", "'w.q'", "Q4_K"});
}

TEST_F(safetensors_test, bad_shape_and_offsets) {
  expect_error(open_raw("s.safetensors",
                        raw_file(R"({"neg": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)),
               {"'neg'", "shape"});
  expect_error(open_raw("s.safetensors",
                        raw_file(R"({"flt": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8)),
               {"'flt'", "shape"});
  expect_error(open_raw("s.safetensors",
                        raw_file(R"({"rev": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}})", 8)),
               {"'rev'", "begin > end"});
  expect_error(open_raw("s.safetensors", raw_file(R"({"nooff": {"dtype": "U8", "shape": [1]}})", 8)),
               {"'nooff'", "data_offsets"});
  expect_error(
      open_raw("s.safetensors", raw_file(R"({"huge": {"dtype": "F32", "shape": [4294967296, 4294967296],
                          "data_offsets": [0, 0]}})",
                                         0)),
      {"'huge'", "overflow"});
}

TEST_F(safetensors_test, shape_offset_mismatch) {
  expect_error(open_raw("model.safetensors",
                        raw_file(R"({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 12]}})", 24)),
               {"model.safetensors: tensor 'x': data_offsets [0, 12] span 12 bytes but shape [2, 3] of F32 "
                "needs 24"});
}

TEST_F(safetensors_test, overlapping_tensors) {
  expect_error(
      open_raw("o.safetensors", raw_file(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                                         16)),
      {"o.safetensors", "'a'", "'b'", "overlap"});
  // Empty tensors occupy no bytes, so sharing an offset is fine.
  EXPECT_TRUE(
      open_raw("e.safetensors", raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                   "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                                         8))
          .ok());
}

TEST_F(safetensors_test, duplicate_key_in_header) {
  expect_error(
      open_raw("dup.safetensors", raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                           "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                           2)),
      {"dup.safetensors", "'w'", "twice"});
}

TEST_F(safetensors_test, truncated_real_file) {
  std::string bytes = read_bytes(k_tiny_a + "/model.safetensors");
  ASSERT_GT(bytes.size(), 100u);
  write_bytes(path("model.safetensors"), bytes.substr(0, bytes.size() - 5));
  auto sf = safetensors_file::open(path("model.safetensors"));
  expect_error(sf.get_status(), {"model.safetensors", "truncated", "tensor '"}, status_code::data_loss);
  // The store reports the same error for the directory.
  expect_error(weight_store::open(dir_).get_status(), {"truncated"}, status_code::data_loss);
}

TEST_F(safetensors_test, every_prefix_and_random_corruption_never_crash) {
  std::vector<float> d = {1.f, 2.f, 3.f, 4.f};
  ASSERT_TRUE(
      safetensors_write(path("full.safetensors"),
                        {{"a", dtype::f32, {2}, d.data(), 8}, {"b", dtype::f32, {2}, d.data() + 2, 8}},
                        {{"format", "pt"}})
          .ok());
  const std::string full = read_bytes(path("full.safetensors"));
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_FALSE(open_raw("cut.safetensors", full.substr(0, n)).ok()) << "prefix " << n;
  }
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 500; ++iter) {
    std::string b = full;
    size_t at = rng() % b.size();
    b[at] = static_cast<char>(rng());
    (void)open_raw("flip.safetensors", b);  // ok or not, but no crash
  }
}

TEST_F(safetensors_test, missing_file) {
  expect_error(safetensors_file::open(path("nope.safetensors")).get_status(), {"nope.safetensors"},
               status_code::not_found);
  expect_error(weight_store::open(path("nope")).get_status(), {"nope"}, status_code::not_found);
}

// -- directory and index errors -----------------------------------------------

TEST_F(safetensors_test, index_points_at_missing_shard) {
  write_shard("model-00001-of-00002.safetensors", {"a"});
  write_bytes(path("model.safetensors.index.json"),
              R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00002-of-00002.safetensors"}})");
  expect_error(weight_store::open(dir_).get_status(), {"model-00002-of-00002.safetensors", "'b'"},
               status_code::not_found);
}

TEST_F(safetensors_test, index_names_tensor_shard_lacks) {
  write_shard("s1.safetensors", {"a"});
  write_shard("s2.safetensors", {"b"});
  write_bytes(path("model.safetensors.index.json"),
              R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors",
                                 "ghost": "s1.safetensors"}})");
  expect_error(weight_store::open(dir_).get_status(), {"'ghost'", "s1.safetensors"});
}

TEST_F(safetensors_test, duplicate_names_across_shards) {
  write_shard("s1.safetensors", {"a", "shared"});
  write_shard("s2.safetensors", {"b", "shared"});
  write_bytes(path("model.safetensors.index.json"),
              R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors",
                                 "shared": "s1.safetensors"}})");
  expect_error(weight_store::open(dir_).get_status(), {"'shared'", "s1.safetensors", "s2.safetensors"});
}

TEST_F(safetensors_test, bad_index) {
  write_bytes(path("model.safetensors.index.json"), "{not json");
  expect_error(weight_store::open(dir_).get_status(), {"model.safetensors.index.json", "JSON"});
  write_bytes(path("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error(weight_store::open(dir_).get_status(), {"weight_map"});
  write_bytes(path("model.safetensors.index.json"), R"({"weight_map": {"a": "../x.safetensors"}})");
  expect_error(weight_store::open(dir_).get_status(), {"'a'", "../x.safetensors"});
}

TEST_F(safetensors_test, directory_without_safetensors) {
  write_bytes(path("config.json"), "{}");
  expect_error(weight_store::open(dir_).get_status(), {dir_.c_str(), "no "}, status_code::not_found);
}

TEST_F(safetensors_test, several_files_without_index) {
  write_shard("one.safetensors", {"a"});
  write_shard("two.safetensors", {"b"});
  expect_error(weight_store::open(dir_).get_status(), {"one.safetensors", "two.safetensors"});
}

}  // namespace
}  // namespace hart
