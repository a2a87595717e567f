#include "fuzz/targets.h"

#include "runtime/model/config.h"
#include "runtime/model/safetensors.h"
#include "runtime/pd_link/pd_codec.h"
#include "runtime/protocol/codec.h"
#include "runtime/text/tokenizer.h"
#include "runtime/weight_sync/sync_codec.h"
#include "runtime/worker_link/step_codec.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace hart::fuzz {
namespace {

std::string as_string(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

// The input cut into frames: byte 0 % 4 is the header's length (2 for a valid one), then the
// header; for weight sync one more byte, % 64, is the length of a trailing data frame; the
// rest is the payload (and that data frame).
struct frames {
  std::string header, payload, data;
};
frames split(const uint8_t* d, size_t n, bool with_data) {
  frames f;
  if (n == 0) return f;
  const char* c = reinterpret_cast<const char*>(d);
  size_t pos = 1;
  const size_t h = std::min<size_t>(d[0] % 4, n - pos);
  f.header.assign(c + pos, h);
  pos += h;
  size_t data = 0;
  if (with_data && pos < n) data = d[pos++] % 64;
  data = std::min(data, n - pos);
  f.payload.assign(c + pos, n - pos - data);
  f.data.assign(c + n - data, data);
  return f;
}

// Frames back into the layout split() reads.
std::string join(const std::string& header, const std::string& payload, const std::string* data = nullptr) {
  std::string out(1, char(header.size()));
  out += header;
  if (data) out += char(data->size());
  out += payload;
  if (data) out += *data;
  return out;
}

// -- client frames (docs/protocol.md §2) ----------------------------------------------------

bool client_frames(const uint8_t* d, size_t n) {
  const frames f = split(d, n, false);
  const protocol::byte_view h{f.header.data(), f.header.size()}, p{f.payload.data(), f.payload.size()};
  protocol::request_ref ref;
  const bool request = protocol::decode_request(h, p, &ref).ok();
  return protocol::decode_reply(h, p).ok() || request;
}

std::vector<std::string> client_seeds() {
  std::vector<std::string> out;
  protocol::generate_request g;
  g.request_id = 7;
  g.token_ids = {1, 2, 3};
  g.sampling.max_new_tokens = 4;
  protocol::generate_request m = g;
  m.kind = protocol::prompt_kind::messages;
  m.messages = {{"user", "hello"}};
  protocol::control_request c;
  c.tag = 3;
  c.verb = protocol::control_verb::abort;
  c.request_id = 7;
  for (const protocol::request& r : {protocol::request{g}, protocol::request{m}, protocol::request{c}}) {
    auto e = protocol::encode_request(r);
    if (e.ok()) out.push_back(join(std::string(e->header.begin(), e->header.end()), as_string(e->payload)));
  }
  auto rep = protocol::encode_reply(protocol::reply{protocol::health_reply{3, true, 10}});
  if (rep.ok())
    out.push_back(join(std::string(rep->header.begin(), rep->header.end()), as_string(rep->payload)));
  return out;
}

// -- worker step frames (runtime/worker_link) -----------------------------------------------

bool worker_frames(const uint8_t* d, size_t n) {
  return worker_link::decode(d, n).ok();
}

std::vector<std::string> worker_seeds() {
  std::vector<std::string> out;
  worker_link::worker_hello h;
  h.pid = 42;
  h.model.vocab_size = 512;
  h.token = "00ff";
  worker_link::worker_configure c{128, 16, 8, 2500};
  for (const worker_link::worker_message& m : {worker_link::worker_message{h}, worker_link::worker_message{c},
                                               worker_link::worker_message{worker_link::worker_bye{}}}) {
    auto e = worker_link::encode(m);
    if (e.ok()) out.push_back(as_string(*e));
  }
  return out;
}

// -- PD-link frames (runtime/pd_link, docs/pd.md) -------------------------------------------

bool pd_frames(const uint8_t* d, size_t n) {
  return pd_link::decode(d, n).ok();
}

std::vector<std::string> pd_seeds() {
  pd_link::prefill_request p;
  p.tokens = {1, 2, 3, 4, 5};
  p.sampling.stop = {"\n"};
  p.skip_full = 1;
  p.layout = 0xabcdef;
  p.page_size = 4;
  kv_pages kv;  // pages [1, 3) of 10 positions in pages of 4: two full pages of 2 floats, one SWA page of 1
  kv.n_tokens = 10;
  kv.layout = 0xabcdef;
  kv.page_size = 4;
  kv.first_full = 1;
  kv.first_swa = 2;
  kv.first_page = 1;
  kv.end_page = 3;
  kv.full = {1, 2, 3, 4};
  kv.swa = {5};
  std::vector<std::string> out;
  for (const pd_link::pd_body& b :
       {pd_link::pd_body{p}, pd_link::pd_body{pd_link::kv_chunk{kv}},
        pd_link::pd_body{pd_link::kv_done{7, -0.5f, 2, 3, {{7, -0.5f}, {1, -2.0f}}}},
        pd_link::pd_body{pd_link::kv_ack{}},
        pd_link::pd_body{pd_link::kv_refuse{pd_link::refuse_reason::bad_chunk, "sizes"}}}) {
    auto e = pd_link::encode({1, 2, b});
    if (e.ok()) out.push_back(as_string(*e));
  }
  return out;
}

// -- weight-sync frames (docs/protocol.md §8) -----------------------------------------------

bool sync_frames(const uint8_t* d, size_t n) {
  const frames f = split(d, n, true);
  const weight_sync::frame_view h{f.header.data(), f.header.size()}, p{f.payload.data(), f.payload.size()};
  std::vector<weight_sync::frame_view> data;
  if (!f.data.empty()) data.push_back({f.data.data(), f.data.size()});
  const bool request = weight_sync::decode_request(h, p, data).ok();
  return weight_sync::decode_reply(h, p).ok() || request;
}

std::vector<std::string> sync_seeds() {
  std::vector<std::string> out;
  const auto hdr = weight_sync::request_header();
  const std::string header(hdr.begin(), hdr.end());
  weight_sync::bucket_msg b;
  b.version = 2;
  b.chunks.emplace_back("layers.0.attn.wq_a.weight", dtype::bf16, std::vector<int64_t>{2, 4}, 0, 16);
  const std::string bytes(16, '\1');
  for (const weight_sync::sync_request& r :
       {weight_sync::sync_request{weight_sync::begin_msg(2, 1, 16)}, weight_sync::sync_request{b},
        weight_sync::sync_request{weight_sync::end_msg{2, 0, 1}}}) {
    auto e = weight_sync::encode_request(r);
    const std::string none;
    if (e.ok())
      out.push_back(
          join(header, as_string(*e), std::holds_alternative<weight_sync::bucket_msg>(r) ? &bytes : &none));
  }
  return out;
}

// -- files: written to a per-process temp file, then opened as the loaders open them -------

std::string temp_path(const char* what) {
  return "/tmp/hart-fuzz-" + std::to_string(::getpid()) + "-" + what;
}

void write_file(const std::string& path, const uint8_t* d, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(d), std::streamsize(n));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool safetensors_header(const uint8_t* d, size_t n) {
  const std::string path = temp_path("model.safetensors");
  write_file(path, d, n);
  auto f = safetensors_file::open(path);
  if (f.ok()) {
    volatile uint64_t sum = 0;  // touch every tensor's bytes: the offsets must lie in the file
    for (const tensor_entry& e : (*f)->tensors()) {
      for (size_t i = 0; i < e.n_bytes; i += 4096) sum = sum + e.data[i];
      if (e.n_bytes) sum = sum + e.data[e.n_bytes - 1];
    }
  }
  std::remove(path.c_str());
  return f.ok();
}

std::vector<std::string> safetensors_seeds() {
  const std::string path = temp_path("seed.safetensors");
  std::vector<uint8_t> a(2 * 3 * 2, 1), b(4 * 4, 2);
  std::vector<tensor_to_write> t = {{"embed.weight", dtype::bf16, {2, 3}, a.data(), a.size()},
                                    {"norm.weight", dtype::f32, {4}, b.data(), b.size()}};
  std::vector<std::string> out;
  if (safetensors_write(path, t, {{"format", "pt"}}).ok()) out.push_back(read_file(path));
  std::remove(path.c_str());
  return out;
}

bool config_json(const uint8_t* d, size_t n) {
  return model_config_parse(std::string(reinterpret_cast<const char*>(d), n), "fuzz input").ok();
}

std::vector<std::string> config_seeds() {
  std::vector<std::string> out;
  for (const char* m : {"tiny-a", "tiny-c", "official-fp8/mixed4"}) {
    out.push_back(read_file(std::string(HART_FUZZ_TEST_DATA) + "/" + m + "/config.json"));
  }
  return out;
}

bool tokenizer_json(const uint8_t* d, size_t n) {
  const std::string path = temp_path("tokenizer.json");
  write_file(path, d, n);
  auto t = tokenizer::load(path);
  if (t.ok()) {
    auto ids = t->encode("Hello, <|fuzz|> world 123 ü");
    if (ids.ok()) (void)t->decode(*ids);
  }
  std::remove(path.c_str());
  return t.ok();
}

std::vector<std::string> tokenizer_seeds() {
  return {read_file(std::string(HART_FUZZ_TEST_DATA) + "/tiny-a/tokenizer.json")};
}

}  // namespace

const std::vector<target>& targets() {
  static const std::vector<target> all = {
      {"client_frames", client_frames, client_seeds},
      {"worker_frames", worker_frames, worker_seeds},
      {"sync_frames", sync_frames, sync_seeds},
      {"pd_frames", pd_frames, pd_seeds},
      {"safetensors_header", safetensors_header, safetensors_seeds},
      {"config_json", config_json, config_seeds},
      {"tokenizer_json", tokenizer_json, tokenizer_seeds},
  };
  return all;
}

const target* find_target(const std::string& name) {
  for (const target& t : targets()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace hart::fuzz
