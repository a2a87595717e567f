// File: runtime/text/tokenizer.cpp
// Byte-level BPE over raw bytes: vocab pieces are converted from the GPT-2 byte alphabet to raw
// bytes at load, so encode() never builds "Ġ"-style strings, and merges are keyed by id pairs.
#include "runtime/text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/core/utf8.h"

#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace hart {
namespace {

using json = nlohmann::json;

constexpr int64_t k_max_vocab = int64_t{1} << 24;  // bounds id-indexed tables; real ones ~130k

// -- GPT-2 byte alphabet ---
// bytes_to_unicode() inverted: the byte code point `cp` stands for, -1 outside the alphabet.
// Printable bytes stand for themselves; the other 68 (0-32, 127-160, 173) map to U+0100 + n.
int byte_of_char(int cp) {
  if (cp < 256) return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174 ? cp : -1;
  return cp <= 288 ? cp - 256 : cp <= 322 ? cp - 289 + 127 : cp == 323 ? 173 : -1;
}

// Raw bytes of a byte-level piece; nullopt when it holds a character outside the alphabet (the
// HF ByteLevel decoder then keeps the piece's own UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view piece) {
  const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    int len = utf8_next(s + i, piece.size() - i);
    if (len <= 0 || len > 2) return std::nullopt;  // the alphabet is below U+0800
    int b = byte_of_char(len == 1 ? s[i] : ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return out;
}

// -- PCRE2 ---
struct pcre2_deleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using regex_ptr = std::unique_ptr<pcre2_code, pcre2_deleter>;
using match_data_ptr = std::unique_ptr<pcre2_match_data, pcre2_deleter>;

// NOTE(text): HF compiles Split patterns with Oniguruma, which reads \uHHHH; ALT_BSUX plus
// EXTRA_ALT_BSUX make PCRE2 accept \uHHHH, \u{H..}, \xHH and \x{H..} alike.
status_or<regex_ptr> regex_compile(const std::string& pattern) {
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  if (ctx == nullptr) return resource_exhausted("tokenizer: pcre2 compile context");
  pcre2_set_compile_extra_options(ctx, PCRE2_EXTRA_ALT_BSUX);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_BSUX, &err, &err_off, ctx);
  pcre2_compile_context_free(ctx);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("Split regex /%s/ at offset %zu: %s", pattern.c_str(),
                            static_cast<size_t>(err_off), reinterpret_cast<const char*>(msg));
  }
  // Without JIT support pcre2_match() runs the interpreter: slower, same results.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return regex_ptr(code);
}

using range = std::pair<size_t, size_t>;  // [begin, end) byte offsets

// Per-encode() working memory, reused across words.
struct scratch {
  struct symbol {
    int32_t id, prev, next;
  };                  // id -1 once merged into its left neighbour
  struct candidate {  // ordered so that heap.top() is the lowest rank, then the leftmost
    int32_t rank, pos, new_id;
    bool operator<(const candidate& o) const { return std::tie(o.rank, o.pos) < std::tie(rank, pos); }
  };
  match_data_ptr md;
  std::vector<range> pieces, next;
  std::vector<symbol> syms;
  std::priority_queue<candidate> heap;  // empty between words
};

// Split (Isolated): appends the matches of `re` in seg[b, e) and the gaps between them to
// sc.next. The regex sees only this piece, so (?!\S) stops at its end, as in HF.
status split_piece(const pcre2_code* re, std::string_view seg, size_t b, size_t e, scratch& sc) {
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(seg.data() + b);
  size_t len = e - b, start = 0, last = 0;
  while (start <= len) {
    int rc = pcre2_match(re, subj, len, start, PCRE2_NO_UTF_CHECK, sc.md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // NOTE(text): with DeepSeek's patterns only a ~10 MB whitespace run hits PCRE2's default
    // match limit (10M backtracks); such input is refused rather than mis-split.
    if (rc < 0) return resource_exhausted("encode: PCRE2 error %d on a %zu-byte piece", rc, len);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(sc.md.get());
    size_t ms = ov[0], me = ov[1];
    if (me == ms) {  // an empty match is never a piece; step one character
      if (ms >= len) break;
      int l = utf8_next(subj + ms, len - ms);
      start = ms + static_cast<size_t>(l > 0 ? l : 1);
      continue;
    }
    if (ms > last) sc.next.emplace_back(b + last, b + ms);
    sc.next.emplace_back(b + ms, b + me);
    last = start = me;
  }
  if (last < len) sc.next.emplace_back(b + last, e);
  return {};
}

uint64_t pair_key(uint32_t l, uint32_t r) {
  return (uint64_t{l} << 32) | r;
}  // ids are >= 0

// Bucket of a string by its first two bytes, in [0, 256 * 257); one byte has a bucket of its own.
size_t prefix_key(std::string_view s) {
  auto u = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(s[i])); };
  return u(0) * 257 + (s.size() > 1 ? u(1) + 1 : 0);
}

status read_file(const std::string& path, std::string& out) {
  FILE* f = std::fopen(path.c_str(), "rb");  // stdio: no exceptions, errno on failure
  if (f == nullptr) return not_found("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  return err ? data_loss("%s: read failed: %s", path.c_str(), std::strerror(err)) : status();
}

// Rejects a feature this tokenizer does not implement, rather than ignoring it (R12).
status require(bool ok, const std::string& what) {
  return ok ? status() : unimplemented("%s is not supported", what.c_str());
}

}  // namespace

// -- impl ---
struct tokenizer::impl {
  struct added_token {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  struct merge_info {
    int32_t rank, id;
  };
  struct added_match {
    size_t begin, end;
    int32_t id;
  };
  std::unordered_map<std::string, int32_t> piece_ids;  // tokenizer.json spelling -> id
  std::vector<std::string> id_bytes;                   // [vocab_size] raw bytes, "" for holes
  std::vector<uint8_t> id_special;                     // [vocab_size] 1 for special added tokens
  std::array<int32_t, 256> byte_ids{};                 // byte -> id of its 1-byte token, or -1
  std::unordered_map<uint64_t, merge_info> merges;     // pair_key(left, right) -> merge
  std::vector<added_token> added;                      // longest first
  std::array<bool, 256> added_first{};                 // some added token starts with this byte
  std::vector<std::vector<int32_t>> added_by_prefix;   // [256 * 257] prefix_key -> added[]
  std::vector<regex_ptr> splits;                       // pre-tokenizer Split steps, in order
  tokenizer_config config;

  // An id as JSON holds it: an integer in [0, k_max_vocab). A float (2e45, 1.5) is refused
  // before any conversion (converting an out-of-range double to an integer is undefined).
  static status_or<int64_t> token_id(const json& v, const char* what) {
    if (!v.is_number_integer()) return invalid_argument("%s %s is not an integer", what, v.dump().c_str());
    const int64_t id =
        v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(k_max_vocab) ? -1 : v.get<int64_t>();
    if (id < 0 || id >= k_max_vocab)
      return invalid_argument("%s %s is outside [0, %lld)", what, v.dump().c_str(), (long long)k_max_vocab);
    return id;
  }

  status build(const json& tj) {
    const json norm = tj.value("normalizer", json());
    bool none = norm.is_null() || norm.dump() == R"({"normalizers":[],"type":"Sequence"})";
    HART_RETURN_IF_ERROR(require(none, "normalizer " + norm.dump()));
    int64_t max_id = -1;
    HART_RETURN_IF_ERROR(build_model(tj.at("model"), max_id));
    for (const json& a : tj.value("added_tokens", json::array())) {
      HART_ASSIGN_OR_RETURN(int64_t id, token_id(a.at("id"), "added token id"));
      added_token t{a.at("content").get<std::string>(), static_cast<int32_t>(id), a.value("special", false),
                    a.value("lstrip", false), a.value("rstrip", false)};
      if (t.content.empty()) continue;
      max_id = std::max(max_id, id);
      added.push_back(std::move(t));
    }
    id_bytes.resize(static_cast<size_t>(max_id + 1));
    added_by_prefix.resize(256 * 257);
    id_special.assign(id_bytes.size(), 0);
    byte_ids.fill(-1);
    for (const auto& [piece, id] : piece_ids) {
      std::optional<std::string> raw = byte_level_to_bytes(piece);
      id_bytes[id] = raw ? *raw : piece;
      if (raw && raw->size() == 1) byte_ids[static_cast<unsigned char>((*raw)[0])] = id;
    }
    std::stable_sort(added.begin(), added.end(), [](const added_token& a, const added_token& b) {
      return a.content.size() > b.content.size();  // so added_by_prefix lists longest first
    });
    for (size_t k = 0; k < added.size(); ++k) {  // added tokens override vocab entries
      const added_token& t = added[k];
      id_bytes[t.id] = t.content;
      id_special[t.id] = t.special ? 1 : 0;
      piece_ids[t.content] = t.id;
      added_first[static_cast<unsigned char>(t.content[0])] = true;
      added_by_prefix[prefix_key(t.content)].push_back(static_cast<int32_t>(k));
    }
    HART_RETURN_IF_ERROR(build_pre_tokenizer(tj.value("pre_tokenizer", json())));
    const json dec = tj.value("decoder", json());  // post_processor is ignored: see encode()
    return require(dec.is_object() && dec.value("type", "") == "ByteLevel", "decoder " + dec.dump());
  }

  status build_model(const json& m, int64_t& max_id) {
    HART_RETURN_IF_ERROR(require(m.value("type", "BPE") == "BPE", "a model other than BPE"));
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      HART_RETURN_IF_ERROR(require(m.value(k, json()).is_null() || m.value(k, json()) == "", k));
    }
    HART_RETURN_IF_ERROR(require(!m.value("byte_fallback", false), "byte_fallback"));
    HART_RETURN_IF_ERROR(require(!m.value("ignore_merges", false), "ignore_merges"));
    const json& vocab = m.at("vocab");
    if (!vocab.is_object()) return invalid_argument("model.vocab is not an object");
    piece_ids.reserve(vocab.size() + 1024);
    for (const auto& [piece, v] : vocab.items()) {
      HART_ASSIGN_OR_RETURN(int64_t id, token_id(v, "vocab id"));
      piece_ids.emplace(piece, static_cast<int32_t>(id));
      max_id = std::max(max_id, id);
    }
    const json& list = m.at("merges");
    merges.reserve(list.size());
    for (size_t rank = 0; rank < list.size(); ++rank) {
      const json& e = list[rank];
      std::string l = e.is_string() ? e.get<std::string>() : "", r;  // or the older "l r" form
      if (e.is_array() && e.size() == 2) {
        l = e[0].get<std::string>();
        r = e[1].get<std::string>();
      } else if (std::count(l.begin(), l.end(), ' ') == 1) {
        r = l.substr(l.find(' ') + 1);
        l.resize(l.find(' '));
      } else {
        return invalid_argument("merge %zu is neither [l, r] nor \"l r\"", rank);
      }
      auto il = piece_ids.find(l), ir = piece_ids.find(r), im = piece_ids.find(l + r);
      if (il == piece_ids.end() || ir == piece_ids.end() || im == piece_ids.end()) {
        return invalid_argument("merge %zu (%s %s) names a token not in vocab", rank, l.c_str(), r.c_str());
      }
      // As in HF, a repeated pair keeps its last rank.
      merges[pair_key(il->second, ir->second)] = {static_cast<int32_t>(rank), im->second};
    }
    return {};
  }

  // Split(Isolated, Regex)* then ByteLevel(add_prefix_space=false, use_regex=false): the shape
  // DeepSeek ships. Anything else is unimplemented.
  status build_pre_tokenizer(const json& pt) {
    if (!pt.is_object()) return require(false, "a missing pre_tokenizer");
    const json steps = pt.value("type", "") == "Sequence" ? pt.at("pretokenizers") : json::array({pt});
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& s = steps[i];
      std::string type = s.value("type", "");
      if (type == "ByteLevel") {
        HART_RETURN_IF_ERROR(require(i + 1 == steps.size(), "a pre_tokenizer after ByteLevel"));
        HART_RETURN_IF_ERROR(require(!s.value("add_prefix_space", false), "add_prefix_space"));
        return require(!s.value("use_regex", true), "ByteLevel use_regex");
      }
      HART_RETURN_IF_ERROR(require(type == "Split", "pre_tokenizer " + type));
      // With Isolated every match and every gap is a piece, so `invert` changes nothing.
      HART_RETURN_IF_ERROR(require(s.value("behavior", "") == "Isolated", "a non-Isolated Split"));
      HART_RETURN_IF_ERROR(require(s.at("pattern").contains("Regex"), "a Split String pattern"));
      HART_ASSIGN_OR_RETURN(regex_ptr re, regex_compile(s["pattern"]["Regex"].get<std::string>()));
      splits.push_back(std::move(re));
    }
    return require(false, "a pre_tokenizer without ByteLevel");
  }

  status apply_config(const json& cfg) {
    auto token = [&](const char* key) {  // a string, or an AddedToken {"content": ...}
      const json v = cfg.value(key, json());
      return v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
    };
    config.bos_token = token("bos_token");
    config.eos_token = token("eos_token");
    config.add_bos_token = cfg.value("add_bos_token", json()) == true;
    if (auto p = piece_ids.find(config.bos_token); p != piece_ids.end()) config.bos_id = p->second;
    if (auto p = piece_ids.find(config.eos_token); p != piece_ids.end()) config.eos_id = p->second;
    return {};
  }

  // Leftmost-longest added token at or after `pos` (HF's aho-corasick); special ones only if
  // `special`. NOTE(text): lstrip/rstrip strip ASCII spaces only; single_word is ignored.
  std::optional<added_match> find_added(std::string_view text, size_t pos, bool special) const {
    auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    for (size_t i = pos; i < text.size(); ++i) {
      if (!added_first[static_cast<unsigned char>(text[i])]) continue;
      size_t two = prefix_key(text.substr(i, 2));
      for (size_t key : {two, two - two % 257}) {  // 2+-byte tokens, then the 1-byte one
        for (int32_t k : added_by_prefix[key]) {
          const added_token& t = added[k];
          if ((t.special && !special) || text.substr(i, t.content.size()) != t.content) continue;
          size_t b = i, e = i + t.content.size();
          while (t.lstrip && b > pos && space(text[b - 1])) --b;
          while (t.rstrip && e < text.size() && space(text[e])) ++e;
          return added_match{b, e, t.id};
        }
      }
    }
    return std::nullopt;
  }

  // Text with no added tokens in it: pre-tokenize, then BPE each piece.
  status encode_plain(std::string_view seg, std::vector<int32_t>& out, scratch& sc) const {
    sc.pieces.assign(1, range(0, seg.size()));
    for (const regex_ptr& re : splits) {
      sc.next.clear();
      for (const range& p : sc.pieces) {
        HART_RETURN_IF_ERROR(split_piece(re.get(), seg, p.first, p.second, sc));
      }
      std::swap(sc.pieces, sc.next);
    }
    for (const range& p : sc.pieces) bpe(seg.substr(p.first, p.second - p.first), out, sc);
    return {};
  }

  // Lowest-rank pair first, leftmost on ties: HF's Word::merge_all(), with heap entries skipped
  // once the pair at their position has changed.
  void bpe(std::string_view w, std::vector<int32_t>& out, scratch& sc) const {
    auto& syms = sc.syms;
    syms.clear();
    for (char c : w) {
      int32_t id = byte_ids[static_cast<unsigned char>(c)];
      if (id < 0) continue;  // as HF without unk_token: a byte with no token is dropped
      int32_t n = static_cast<int32_t>(syms.size());
      syms.push_back({id, n - 1, n + 1});
    }
    if (syms.empty()) return;
    syms.back().next = -1;
    auto push_pair = [&](int32_t pos) {
      auto it = merges.find(pair_key(syms[pos].id, syms[syms[pos].next].id));
      if (it != merges.end()) sc.heap.push({it->second.rank, pos, it->second.id});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);
    while (!sc.heap.empty()) {
      scratch::candidate c = sc.heap.top();
      sc.heap.pop();
      scratch::symbol& l = syms[c.pos];
      if (l.id < 0 || l.next < 0) continue;
      scratch::symbol& r = syms[l.next];
      auto it = merges.find(pair_key(l.id, r.id));
      if (it == merges.end() || it->second.id != c.new_id) continue;  // stale entry
      l.id = c.new_id;
      r.id = -1;
      l.next = r.next;
      if (l.next >= 0) syms[l.next].prev = c.pos;
      if (l.prev >= 0) push_pair(l.prev);
      if (l.next >= 0) push_pair(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  }
};

// -- tokenizer ---
status_or<tokenizer> tokenizer::load(const std::string& path) {
  std::string tj, cfg;
  HART_RETURN_IF_ERROR(read_file(path, tj));
  std::string cfg_path = path.substr(0, path.find_last_of('/') + 1) + "tokenizer_config.json";
  bool has_cfg = std::ifstream(cfg_path).good();
  if (has_cfg) HART_RETURN_IF_ERROR(read_file(cfg_path, cfg));
  // nlohmann throws on malformed input and on type mismatches; this is that boundary (R28).
  const std::string* file = &path;
  try {
    auto p = std::make_shared<impl>();
    status s = p->build(json::parse(tj));
    if (s.ok()) file = &cfg_path;
    if (s.ok() && has_cfg) s = p->apply_config(json::parse(cfg));
    if (!s.ok()) return status(s.code(), *file + ": " + s.message());
    return tokenizer(std::move(p));
  } catch (const json::exception& e) {
    return invalid_argument("%s: malformed: %s", file->c_str(), e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("%s: out of memory while loading", file->c_str());
  }
}

status_or<std::vector<int32_t>> tokenizer::encode(std::string_view text, bool parse_special) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    int l = utf8_next(bytes + i, text.size() - i);
    if (l <= 0) return invalid_argument("encode: invalid UTF-8 at byte offset %zu", i);
    len = static_cast<size_t>(l);
  }
  std::vector<int32_t> out;
  if (text.empty()) return out;
  out.reserve(text.size() / 3 + 4);
  scratch sc;
  sc.md.reset(pcre2_match_data_create(1, nullptr));
  for (size_t pos = 0; pos < text.size();) {
    std::optional<impl::added_match> m = impl_->find_added(text, pos, parse_special);
    size_t end = m ? m->begin : text.size();
    if (end > pos) HART_RETURN_IF_ERROR(impl_->encode_plain(text.substr(pos, end - pos), out, sc));
    if (!m) break;
    out.push_back(m->id);
    pos = m->end;
  }
  return out;
}

status_or<std::string> tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return out_of_range("decode: id %d at position %zu is outside [0, %d)", id, i, vocab_size());
    }
    if (!(skip_special && impl_->id_special[id])) bytes += impl_->id_bytes[id];
  }
  std::string out;
  utf8_append_lossy(out, bytes, true);
  return out;
}

int32_t tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_bytes.size());
}
const tokenizer_config& tokenizer::config() const {
  return impl_->config;
}

std::optional<int32_t> tokenizer::token_id(std::string_view piece) const {
  auto it = impl_->piece_ids.find(std::string(piece));
  if (it == impl_->piece_ids.end()) return std::nullopt;
  return it->second;
}

bool tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->id_special[id] != 0;
}

std::string_view tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->id_bytes[id];
}

// -- stream_decoder ---
status_or<std::string> stream_decoder::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) {
    return out_of_range("stream_decoder: id %d is outside [0, %d)", id, tok_.vocab_size());
  }
  std::string out;
  if (skip_special_ && tok_.is_special(id)) return out;
  pending_.append(tok_.token_bytes(id));
  pending_.erase(0, utf8_append_lossy(out, pending_, false));
  return out;
}

std::string stream_decoder::flush() {
  std::string out;
  utf8_append_lossy(out, pending_, true);
  pending_.clear();
  return out;
}

}  // namespace hart
