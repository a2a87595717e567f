#include "tests/golden/official_fp8_fixture.h"

#include "runtime/core/check.h"
#include "runtime/model/random_checkpoint.h"
#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace hart::testing {
namespace {

// sum over bytes of byte_i * (i + 1) mod 2^64: the reference's fingerprint of a file.
uint64_t fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t sum = 0, i = 0;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = in.gcount();
    for (std::streamsize k = 0; k < n; ++k) sum += uint64_t(uint8_t(buf[size_t(k)])) * ++i;
  }
  return sum;
}

std::string fingerprints(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() == ".safetensors") files.push_back(f.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const std::string& f : files)
    out += (out.empty() ? "" : ",") + f + ":" + std::to_string(fingerprint(dir + "/" + f));
  return out;
}

struct remove_at_exit {
  std::vector<std::string> dirs;
  ~remove_at_exit() {
    for (const std::string& d : dirs) std::filesystem::remove_all(d);
  }
};

template <typename T>
std::vector<T> copy_tensor(const tensor_entry* e, dtype want) {
  HART_CHECK(e && e->type == want) << "golden tensor " << (e ? e->name : "?");
  std::vector<T> v(size_t(e->numel()));
  std::memcpy(v.data(), e->data, e->n_bytes);
  return v;
}

std::unique_ptr<official_golden> load(const std::string& name) {
  auto g = std::make_unique<official_golden>();
  g->name = name;
  const std::string src = std::string(HART_TEST_DATA) + "/official-fp8/" + name;
  auto file = safetensors_file::open(src + "/golden.safetensors");
  if (!file.ok()) {
    ADD_FAILURE() << "official golden " << name << ": " << file.get_status().to_string();
    return nullptr;
  }
  const safetensors_file& f = **file;
  g->metadata = f.metadata();
  const tensor_entry* ids = f.find("input_ids");
  HART_CHECK(ids && ids->type == dtype::i32 && ids->shape.size() == 2);
  g->batch = ids->shape[0];
  g->seq = ids->shape[1];
  const std::vector<int32_t> raw = copy_tensor<int32_t>(ids, dtype::i32);
  for (int64_t b = 0; b < g->batch; ++b)
    g->input_ids.emplace_back(raw.begin() + b * g->seq, raw.begin() + (b + 1) * g->seq);
  g->logits = copy_tensor<float>(f.find("logits"), dtype::f32);
  g->vocab = f.find("logits")->shape[2];
  g->decode_logits = copy_tensor<float>(f.find("decode_logits"), dtype::f32);
  g->decode_start = std::stoll(g->metadata.at("decode_start"));
  for (const tensor_entry& e : f.tensors()) {
    if (e.name.rfind("topk.", 0) == 0)
      g->topk[std::stoll(e.name.substr(5))] = copy_tensor<int32_t>(&e, dtype::i32);
  }

  static remove_at_exit cleanup;
  g->checkpoint_dir =
      (std::filesystem::temp_directory_path() / ("hart-official-" + name + "-" + std::to_string(getpid())))
          .string();
  cleanup.dirs.push_back(g->checkpoint_dir);
  std::ifstream cfg(src + "/config.json");
  random_checkpoint_options o;
  o.seed = k_official_checkpoint_seed;
  o.format = checkpoint_format::release;
  o.shard_bytes = 4 << 20;  // several shards and an index, as released
  const status wrote = random_checkpoint_write(g->checkpoint_dir, nlohmann::json::parse(cfg), o);
  if (!wrote.ok()) {
    ADD_FAILURE() << "official golden " << name << ": " << wrote.to_string();
    return nullptr;
  }
  const std::string have = fingerprints(g->checkpoint_dir), want = g->metadata["checkpoint_fingerprint"];
  if (have != want) {
    ADD_FAILURE() << "official golden " << name
                  << ": the regenerated checkpoint is not the one the reference ran (" << have << " vs "
                  << want << ")";
    return nullptr;
  }
  return g;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

const official_golden* official_golden_load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<official_golden>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load(name)).first;
  return it->second.get();
}

const char* official_feed_name(official_feed f) {
  switch (f) {
    case official_feed::whole:
      return "whole";
    case official_feed::chunked:
      return "chunks of 150";
    case official_feed::decode:
      return "decode";
    case official_feed::decode_alone:
      return "decode alone";
  }
  return "?";
}

official_diff official_measure(const forward_engine& e, const official_golden& g, official_feed feed) {
  const int64_t B = g.batch, S = g.seq, V = g.vocab;
  std::vector<sequence_state> seqs;
  for (int64_t b = 0; b < B; ++b) seqs.push_back(e.new_sequence());
  std::vector<double> errs;
  int64_t agree = 0;
  official_diff d;
  // Feeds [from, to) of every row (or of row `only`) in one call; compares the rows' logits with
  // want[b][pos - want_from].
  auto step = [&](int64_t from, int64_t to, const std::vector<float>* want, int64_t want_from,
                  int64_t want_len, forward_trace* trace, int64_t only = -1) {
    const int64_t b0 = only < 0 ? 0 : only, b1 = only < 0 ? B : only + 1;
    std::vector<batch_item> batch;
    for (int64_t b = b0; b < b1; ++b) {
      batch.push_back({&seqs[size_t(b)],
                       std::vector<int32_t>(g.input_ids[b].begin() + from, g.input_ids[b].begin() + to),
                       want ? logits_request::all : logits_request::none});
    }
    std::vector<float> got;
    const status s = e.forward(batch, want ? &got : nullptr, trace);
    HART_CHECK(s.ok()) << s.to_string();
    if (!want) return;
    const int64_t n = to - from;
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; j < n; ++j) {
        const float* a = got.data() + ((b - b0) * n + j) * V;
        const float* r = want->data() + (b * want_len + from + j - want_from) * V;
        double num = 0, den = 0;
        for (int64_t v = 0; v < V; ++v) {
          num += (double(a[v]) - r[v]) * (double(a[v]) - r[v]);
          den += double(r[v]) * r[v];
        }
        errs.push_back(std::sqrt(num / den));
        agree += std::max_element(a, a + V) - a == std::max_element(r, r + V) - r;
      }
    }
  };
  if (feed == official_feed::whole) {
    forward_trace trace;
    step(0, S, &g.logits, 0, S, &trace);
    int64_t same = 0, total = 0;
    for (const auto& [layer, want] : g.topk) {
      const std::vector<int32_t>& got = trace.topk[layer];
      const int64_t K = int64_t(want.size()) / (B * S);
      for (int64_t r = 0; r < B * S; ++r) {
        std::set<int32_t> a(got.begin() + r * K, got.begin() + (r + 1) * K),
            w(want.begin() + r * K, want.begin() + (r + 1) * K);
        same += a == w;
        ++total;
      }
    }
    if (total) d.topk_sets_equal = double(same) / double(total);
  } else if (feed == official_feed::chunked) {
    for (int64_t from = 0; from < S; from += 150)
      step(from, std::min(S, from + 150), &g.logits, 0, S, nullptr);
  } else {
    step(0, g.decode_start, nullptr, 0, 0, nullptr);
    for (int64_t t = g.decode_start; t < S; ++t) {
      if (feed == official_feed::decode) {
        step(t, t + 1, &g.decode_logits, g.decode_start, S - g.decode_start, nullptr);
        continue;
      }
      for (int64_t b = 0; b < B; ++b)
        step(t, t + 1, &g.decode_logits, g.decode_start, S - g.decode_start, nullptr, b);
    }
  }
  d.positions = int64_t(errs.size());
  d.median_rel = median(errs);
  d.max_rel = errs.empty() ? 0 : *std::max_element(errs.begin(), errs.end());
  d.top1 = errs.empty() ? 0 : double(agree) / double(errs.size());
  return d;
}

}  // namespace hart::testing
