#include "cli/client_json.h"

#include "runtime/protocol/validate.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

namespace hart::cli {
namespace {

using json = nlohmann::json;

// -- checked readers: each returns invalid_argument naming `path` -------------------------

// A value as the line wrote it, short enough for a message.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() <= 48 ? s : s.substr(0, 45) + "...";
}

// `v` as sign and magnitude when it is an integer: a JSON integer, or a number written with
// a fraction or exponent whose value is whole (2.0, 1e3). False for anything else.
bool as_integer(const json& v, bool* negative, uint64_t* magnitude) {
  if (v.is_number_unsigned()) {
    *negative = false;
    *magnitude = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    *negative = s < 0;
    *magnitude = s < 0 ? uint64_t(0) - uint64_t(s) : uint64_t(s);
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 18446744073709551616.0) return false;
    *negative = d < 0;
    *magnitude = uint64_t(std::fabs(d));
    return true;
  }
  return false;
}

template <typename T>
status read_int(const json& v, const std::string& path, T lo, T hi, T* out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  bool neg = false;
  uint64_t mag = 0;
  bool in = as_integer(v, &neg, &mag);
  if constexpr (std::is_signed_v<T>) {
    // A signed bound's magnitude, without overflowing at the minimum.
    auto abs_u = [](int64_t x) { return x >= 0 ? uint64_t(x) : uint64_t(-(x + 1)) + 1; };
    if (in && neg)
      in = lo < 0 && mag <= abs_u(lo) && (hi >= 0 || mag >= abs_u(hi));
    else if (in)
      in = hi >= 0 && mag <= uint64_t(hi) && (lo <= 0 || mag >= uint64_t(lo));
    if (in) *out = neg ? T(-int64_t(mag - 1) - 1) : T(mag);
  } else {
    in = in && !neg && mag >= uint64_t(lo) && mag <= uint64_t(hi);
    if (in) *out = T(mag);
  }
  if (!in) {
    return invalid_argument("%s: %s is not an integer in [%s, %s]", path.c_str(), shown(v).c_str(),
                            std::to_string(lo).c_str(), std::to_string(hi).c_str());
  }
  return {};
}

// A finite number in [lo, hi] (or (lo, hi] when `lo_open`), checked after rounding to the
// float the wire carries (1e-50 is not > 0 once it is a float).
status read_float(const json& v, const std::string& path, float lo, float hi, bool lo_open, float* out) {
  const char* open = lo_open ? "(" : "[";
  if (!v.is_number()) {
    return invalid_argument("%s: %s is not a number in %s%g, %g]", path.c_str(), shown(v).c_str(), open, lo,
                            hi);
  }
  const double d = v.get<double>();
  // JSON text has no NaN or Inf (and the parser refuses 1e999), but a json value built in
  // code can hold them.
  if (!std::isfinite(d)) return invalid_argument("%s: not a finite number", path.c_str());
  const float f = std::fabs(d) <= double(std::numeric_limits<float>::max())
                      ? float(d)
                      : float(d > 0 ? HUGE_VAL : -HUGE_VAL);
  if (!((lo_open ? f > lo : f >= lo) && f <= hi)) {
    return invalid_argument("%s: %s is not a number in %s%g, %g]", path.c_str(), shown(v).c_str(), open, lo,
                            hi);
  }
  *out = f;
  return {};
}

status read_bool(const json& v, const std::string& path, bool* out) {
  if (!v.is_boolean()) return invalid_argument("%s: %s is not true or false", path.c_str(), shown(v).c_str());
  *out = v.get<bool>();
  return {};
}

status read_text(const json& v, const std::string& path, size_t min_bytes, size_t max_bytes,
                 std::string* out) {
  if (!v.is_string()) return invalid_argument("%s: %s is not a string", path.c_str(), shown(v).c_str());
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() < min_bytes || s.size() > max_bytes) {
    return invalid_argument("%s: %zu bytes, must be %zu..%zu", path.c_str(), s.size(), min_bytes, max_bytes);
  }
  *out = s;
  return {};
}

// -- one object's fields ------------------------------------------------------------------

// A field reader: reads the value into its target, or fails naming `*path`, which it may
// extend to the part at fault ("tokens" -> "tokens[3]").
using field_read = std::function<status(const json& v, std::string* path)>;

// Reads the fields of one JSON object. The first failure sticks: later reads do nothing,
// and `field`/`error` say which field failed and why.
class object_reader {
 public:
  object_reader(const json& obj, std::vector<const char*> known) : obj_(obj), known_(std::move(known)) {}

  bool ok() const { return error.ok(); }

  // Fails on the first key not in `known`: a misspelt or unsupported field (max_tokens,
  // stream) would otherwise be dropped without a word.
  void no_unknown_keys() {
    for (auto it = obj_.begin(); ok() && it != obj_.end(); ++it) {
      bool found = false;
      for (const char* k : known_) found = found || it.key() == k;
      if (!found) fail(it.key(), invalid_argument("%s: unknown field", it.key().c_str()));
    }
  }

  // The value at `key`, or null when absent or after a failure.
  const json* get(const char* key) const {
    if (!ok()) return nullptr;
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  // Reads `key` with `r` when present; true when it was present and read.
  bool read(const char* key, const field_read& r) {
    const json* v = get(key);
    if (!v) return false;
    std::string path = key;
    if (status s = r(*v, &path); !s.ok()) fail(path, std::move(s));
    return ok();
  }

  // Records the first failure; an ok `s` changes nothing.
  void fail(std::string path, status s) {
    if (!ok() || s.ok()) return;
    field = std::move(path);
    error = std::move(s);
  }

  std::string field;
  status error;

 private:
  const json& obj_;
  std::vector<const char*> known_;
};

template <typename T>
field_read integer(T lo, T hi, T* out) {
  return [=](const json& v, std::string* path) { return read_int<T>(v, *path, lo, hi, out); };
}

field_read number(float lo, float hi, bool lo_open, float* out) {
  return [=](const json& v, std::string* path) { return read_float(v, *path, lo, hi, lo_open, out); };
}

field_read boolean(bool* out) {
  return [=](const json& v, std::string* path) { return read_bool(v, *path, out); };
}

field_read text(size_t min_bytes, size_t max_bytes, std::string* out) {
  return [=](const json& v, std::string* path) { return read_text(v, *path, min_bytes, max_bytes, out); };
}

// A list of min_items..max_items elements, each read by `item` under "<path>[i]".
field_read list(size_t min_items, size_t max_items, field_read item) {
  return [=](const json& v, std::string* path) -> status {
    if (!v.is_array()) return invalid_argument("%s: %s is not a list", path->c_str(), shown(v).c_str());
    if (v.size() < min_items || v.size() > max_items) {
      return invalid_argument("%s: %zu items, must be %zu..%zu", path->c_str(), v.size(), min_items,
                              max_items);
    }
    const std::string base = *path;
    for (size_t i = 0; i < v.size(); ++i) {
      *path = base + "[" + std::to_string(i) + "]";
      HART_RETURN_IF_ERROR(item(v[i], path));
    }
    *path = base;
    return status{};
  };
}

constexpr uint32_t u32_max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();
constexpr int32_t i32_min = std::numeric_limits<int32_t>::min();
constexpr int32_t i32_max = std::numeric_limits<int32_t>::max();

// `messages`: 1..max_chat_messages objects {role, content}, contents within the prompt limit.
field_read chat_messages(std::vector<protocol::chat_message>* out) {
  auto total = std::make_shared<size_t>(0);
  return list(1, protocol::max_chat_messages, [=](const json& m, std::string* path) -> status {
    if (!m.is_object())
      return invalid_argument("%s: %s is not an object {role, content}", path->c_str(), shown(m).c_str());
    object_reader r(m, {"role", "content"});
    protocol::chat_message cm;
    r.no_unknown_keys();
    if (r.ok() && !r.get("role")) r.fail("role", invalid_argument("role: required"));
    r.read("role", text(1, protocol::max_role_bytes, &cm.role));
    r.read("content", text(0, protocol::max_prompt_text_bytes, &cm.content));
    if (!r.ok()) {
      *path += "." + r.field;
      return invalid_argument("%s", (*path + r.error.message().substr(r.field.size())).c_str());
    }
    if ((*total += cm.content.size()) > protocol::max_prompt_text_bytes) {
      *path += ".content";
      return invalid_argument("%s: the contents so far are %zu bytes, limit %zu", path->c_str(), *total,
                              protocol::max_prompt_text_bytes);
    }
    out->push_back(std::move(cm));
    return status{};
  });
}

// A list of up to `max_items` uint32 ids appended to `out`.
field_read id_list(size_t min_items, size_t max_items, std::vector<uint32_t>* out) {
  return list(min_items, max_items, [=](const json& v, std::string* path) {
    uint32_t t = 0;
    HART_RETURN_IF_ERROR(read_int<uint32_t>(v, *path, 0, u32_max, &t));
    out->push_back(t);
    return status{};
  });
}

const std::vector<const char*> generate_fields = {"id",
                                                  "tokens",
                                                  "messages",
                                                  "prompt",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "seed",
                                                  "max_new_tokens",
                                                  "min_new_tokens",
                                                  "stop",
                                                  "stop_token_ids",
                                                  "ignore_eos",
                                                  "n",
                                                  "logprobs",
                                                  "top_logprobs",
                                                  "session",
                                                  "priority",
                                                  "return_routing",
                                                  "return_indexer_picks"};

void generate_from_json(const json& body, parsed_request* p) {
  if (!body.is_object()) {
    p->error = invalid_argument("generate: %s is not an object of fields", shown(body).c_str());
    return;
  }
  if (const auto it = body.find("id"); it != body.end()) p->id = *it;
  object_reader r(body, generate_fields);
  protocol::generate_request g;
  protocol::sampling_options& s = g.sampling;
  s.temperature = 0.0f;  // `hart client`'s default: greedy
  r.no_unknown_keys();
  if (r.ok() && !r.get("id")) {
    r.fail("id", invalid_argument("id: required (an integer in [1, %llu])", (unsigned long long)u64_max));
  }
  r.read("id", integer<uint64_t>(1, u64_max, &g.request_id));
  if (body.count("tokens") + body.count("messages") + body.count("prompt") != 1) {
    r.fail("prompt", invalid_argument("prompt: give exactly one of 'tokens', 'messages' or 'prompt'"));
  }
  g.kind = body.count("tokens")     ? protocol::prompt_kind::token_ids
           : body.count("messages") ? protocol::prompt_kind::messages
                                    : protocol::prompt_kind::text;
  r.read("tokens", id_list(1, protocol::max_prompt_tokens, &g.token_ids));
  r.read("messages", chat_messages(&g.messages));
  r.read("prompt", text(1, protocol::max_prompt_text_bytes, &g.text));
  r.read("temperature", number(0.0f, protocol::max_temperature, false, &s.temperature));
  r.read("top_p", number(0.0f, 1.0f, true, &s.top_p));
  r.read("top_k", [&](const json& v, std::string* path) -> status {  // -1 = off, else >= 1
    if (v.is_number() && v.get<double>() == -1.0) {
      s.top_k = -1;
      return status{};
    }
    status st = read_int<int32_t>(v, *path, 1, i32_max, &s.top_k);
    return st.ok() ? st : invalid_argument("%s (or -1: off)", st.message().c_str());
  });
  r.read("min_p", number(0.0f, 1.0f, false, &s.min_p));
  s.has_seed = r.read("seed", integer<uint64_t>(0, u64_max, &s.seed));
  r.read("max_new_tokens", integer<uint32_t>(1, u32_max, &s.max_new_tokens));
  r.read("min_new_tokens", integer<uint32_t>(0, u32_max, &s.min_new_tokens));
  if (r.ok() && s.min_new_tokens > s.max_new_tokens) {
    r.fail("min_new_tokens", invalid_argument("min_new_tokens: %u is more than max_new_tokens %u",
                                              s.min_new_tokens, s.max_new_tokens));
  }
  const field_read stop_string = [&](const json& v, std::string* path) -> status {
    std::string t;
    HART_RETURN_IF_ERROR(read_text(v, *path, 1, protocol::max_stop_string_bytes, &t));
    s.stop.push_back(std::move(t));
    return status{};
  };
  // A string, or a list of them (as OpenAI's API takes it).
  r.read("stop", [&](const json& v, std::string* path) {
    return v.is_string() ? stop_string(v, path) : list(0, protocol::max_stop_strings, stop_string)(v, path);
  });
  r.read("stop_token_ids", id_list(0, protocol::max_stop_token_ids, &s.stop_token_ids));
  r.read("ignore_eos", boolean(&s.ignore_eos));
  r.read("n", integer<uint32_t>(1, protocol::max_samples, &s.n));
  r.read("logprobs", [&](const json& v, std::string* path) {
    if (v.is_number()) {
      return invalid_argument("%s: %s is not true or false (top_logprobs takes a count)", path->c_str(),
                              shown(v).c_str());
    }
    return read_bool(v, *path, &s.logprobs);
  });
  r.read("top_logprobs", integer<uint8_t>(0, protocol::max_top_logprobs, &s.top_logprobs));
  r.read("session", text(0, protocol::max_session_id_bytes, &g.session_id));
  r.read("priority", integer<int32_t>(i32_min, i32_max, &g.priority));
  r.read("return_routing", boolean(&g.return_routing));
  r.read("return_indexer_picks", boolean(&g.return_indexer_picks));
  // The codec's checks too, so nothing goes out that the server would refuse as malformed.
  // Everything they check is checked above by field: this is a backstop.
  if (r.ok()) r.fail("", protocol::validate_generate(g));
  p->field = r.field;
  p->error = r.error;
  if (r.ok()) p->request = protocol::request{std::move(g)};
}

void control_from_json(const std::string& verb, const json& body, parsed_request* p) {
  protocol::control_request c;
  c.tag = p->tag;
  const json none = json::object();
  object_reader r(body.is_object() ? body : none,
                  verb == "abort" ? std::vector<const char*>{"id", "all"} : std::vector<const char*>{"mode"});
  if (verb == "abort") {
    c.verb = protocol::control_verb::abort;
    if (body.is_object() && body.contains("id")) p->id = body["id"];
    if (!body.is_object()) {
      r.fail("", invalid_argument("abort: %s is not an object {\"id\": N} or {\"all\": true}",
                                  shown(body).c_str()));
    }
    r.no_unknown_keys();
    r.read("all", boolean(&c.all));
    const bool has_id = r.read("id", integer<uint64_t>(1, u64_max, &c.request_id));
    if (r.ok() && c.all == has_id) {
      r.fail(has_id ? "all" : "id", has_id ? invalid_argument("all: give an 'id' or \"all\": true, not both")
                                           : invalid_argument("id: required (or \"all\": true)"));
    }
  } else if (verb == "pause") {
    c.verb = protocol::control_verb::pause;
    std::string m = "abort";
    if (body.is_string()) {
      m = body.get<std::string>();
    } else if (body.is_object()) {
      r.no_unknown_keys();
      r.read("mode", text(0, 64, &m));
    } else {
      r.fail("",
             invalid_argument("pause: %s is not a mode or an object {\"mode\": ...}", shown(body).c_str()));
    }
    if (m == "abort")
      c.mode = protocol::pause_mode::abort;
    else if (m == "retract")
      c.mode = protocol::pause_mode::retract;
    else if (m == "in_place")
      c.mode = protocol::pause_mode::in_place;
    else
      r.fail("mode", invalid_argument("mode: '%s' is not abort, retract or in_place", m.c_str()));
  } else if (verb == "resume") {
    c.verb = protocol::control_verb::resume;
  } else if (verb == "flush_cache") {
    c.verb = protocol::control_verb::flush_cache;
  } else if (verb == "health") {
    c.verb = protocol::control_verb::health;
  } else if (verb == "stats") {
    c.verb = protocol::control_verb::stats;
  } else if (verb == "weight_version") {
    c.verb = protocol::control_verb::weight_version;
  } else {
    r.fail("", invalid_argument("unknown verb '%s'", verb.c_str()));
  }
  if (r.ok()) r.fail("", protocol::validate_request(protocol::request{c}));
  p->field = r.field;
  p->error = r.error;
  if (r.ok()) p->request = protocol::request{c};
}

}  // namespace

parsed_request request_from_json(const json& line, uint64_t tag) {
  parsed_request p;
  if (!line.is_object() || line.size() != 1) {
    p.error = invalid_argument("a request is an object with one key, the verb: {\"generate\": {...}}");
    return p;
  }
  const std::string verb = line.begin().key();
  if (verb == "generate") {
    generate_from_json(line.begin().value(), &p);
  } else {
    p.tag = tag;
    control_from_json(verb, line.begin().value(), &p);
  }
  return p;
}

json error_line(const parsed_request& p) {
  json e = {{"tag", p.tag}, {"id", p.id}, {"code", status_code_name(p.error.code())}};
  if (!p.field.empty()) e["field"] = p.field;
  e["message"] = p.error.message();
  return {{"error", e}};
}

}  // namespace hart::cli
