#include "runtime/model/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

namespace hart {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// NOTE(safetensors): the upstream Rust reader caps the header at 100 MB; a
// larger value is almost certainly a corrupt length prefix.
constexpr uint64_t k_max_header_bytes = 100ull << 20;

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Maps an errno from open/stat on `path` to a status naming it.
status io_error(const char* what, const std::string& path, int err) {
  if (err == ENOENT) return not_found("%s: %s: %s", path.c_str(), what, std::strerror(err));
  return failed_precondition("%s: %s: %s", path.c_str(), what, std::strerror(err));
}

// A JSON non-negative integer that fits in int64; false for floats, negatives, strings.
bool json_to_u63(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = v;
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// Product of `shape` × `elem_bytes`; false on overflow of uint64.
bool checked_byte_count(const std::vector<int64_t>& shape, size_t elem_bytes, uint64_t* out) {
  uint64_t n = elem_bytes;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Parses one tensor's header entry and checks its byte span against shape ×
// dtype; placement in the file (truncation, overlap) is checked by the caller.
status parse_tensor(const std::string& file, const std::string& name, const json& j, tensor_entry* e,
                    uint64_t* begin, uint64_t* end) {
  const char* f = file.c_str();
  const char* n = name.c_str();
  if (!j.is_object()) return invalid_argument("%s: tensor '%s': entry is not a JSON object", f, n);

  auto it = j.find("dtype");
  if (it == j.end() || !it->is_string())
    return invalid_argument("%s: tensor '%s': missing string field 'dtype'", f, n);
  const std::string& dt = it->get_ref<const std::string&>();
  if (!dtype_from_safetensors(dt, &e->type))
    return invalid_argument("%s: tensor '%s': unknown dtype '%s'", f, n, dt.c_str());

  it = j.find("shape");
  if (it == j.end() || !it->is_array())
    return invalid_argument("%s: tensor '%s': missing array field 'shape'", f, n);
  e->shape.clear();
  for (const json& d : *it) {
    uint64_t v = 0;
    if (!json_to_u63(d, &v))
      return invalid_argument(
          "%s: tensor '%s': shape %s has an entry that is not a non-negative "
          "integer",
          f, n, it->dump().c_str());
    e->shape.push_back(static_cast<int64_t>(v));
  }

  it = j.find("data_offsets");
  if (it == j.end() || !it->is_array() || it->size() != 2 || !json_to_u63((*it)[0], begin) ||
      !json_to_u63((*it)[1], end))
    return invalid_argument(
        "%s: tensor '%s': data_offsets must be [begin, end] of non-negative "
        "integers",
        f, n);
  if (*begin > *end)
    return invalid_argument("%s: tensor '%s': data_offsets [%llu, %llu] has begin > end", f, n,
                            (unsigned long long)*begin, (unsigned long long)*end);

  const std::string shape_s = shape_to_string(e->shape);
  const std::string dn_s(dtype_name(e->type));
  const char* dn = dn_s.c_str();
  uint64_t need = 0;
  if (!checked_byte_count(e->shape, dtype_size(e->type), &need))
    return invalid_argument("%s: tensor '%s': shape %s of %s overflows a 64-bit byte count", f, n,
                            shape_s.c_str(), dn);
  if (*end - *begin != need)
    return invalid_argument(
        "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape "
        "%s of %s needs %llu",
        f, n, (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)(*end - *begin),
        shape_s.c_str(), dn, (unsigned long long)need);
  e->name = name;
  e->file = file;
  e->n_bytes = static_cast<size_t>(need);
  return {};
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Shard names in an index are plain relative paths inside the checkpoint directory.
bool is_safe_relative(const std::string& p) {
  if (p.empty() || p[0] == '/') return false;
  for (const auto& part : fs::path(p)) {
    if (part == "..") return false;
  }
  return true;
}

status write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

}  // namespace

// -- tensor_entry ------------------------------------------------------------

int64_t tensor_entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string tensor_entry::shape_string() const {
  return shape_to_string(shape);
}

// -- safetensors_file --------------------------------------------------------

safetensors_file::~safetensors_file() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

status_or<std::unique_ptr<safetensors_file>> safetensors_file::open(const std::string& path) {
  const char* f = path.c_str();
  int fd = ::open(f, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("fstat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("%s: not a regular file", f);
  }
  const size_t file_bytes = static_cast<size_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return data_loss("%s: truncated: file is %zu bytes, shorter than the 8-byte header length", f,
                     file_bytes);
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return io_error("mmap", path, map_err);

  std::unique_ptr<safetensors_file> sf(new safetensors_file());
  sf->path_ = path;
  sf->map_ = map;
  sf->map_bytes_ = file_bytes;
  const auto* base = static_cast<const uint8_t*>(map);

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | base[i];
  if (header_bytes > k_max_header_bytes)
    return invalid_argument("%s: header length %llu exceeds the %llu-byte limit", f,
                            (unsigned long long)header_bytes, (unsigned long long)k_max_header_bytes);
  if (8 + header_bytes > file_bytes)
    return data_loss("%s: truncated: header length %llu runs past the end of the %zu-byte file", f,
                     (unsigned long long)header_bytes, file_bytes);
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  const uint8_t* data = base + 8 + header_bytes;

  // NOTE(safetensors): nlohmann keeps the last of duplicate keys silently, so
  // top-level (depth 1) keys are collected here to reject a shadowed tensor.
  std::set<std::string> seen;
  std::string duplicate;
  json header;
  try {
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!seen.insert(k).second) duplicate = k;
      }
      return true;
    };
    header = json::parse(base + 8, base + 8 + header_bytes, cb);
  } catch (const std::exception& e) {
    // parse_error carries the byte position of the fault.
    return invalid_argument("%s: header is not valid JSON: %s", f, e.what());
  }
  if (!header.is_object()) return invalid_argument("%s: header is not a JSON object", f);
  if (!duplicate.empty())
    return invalid_argument("%s: tensor '%s': listed twice in the header", f, duplicate.c_str());

  struct span {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<span> spans;
  try {
    for (const auto& [key, val] : header.items()) {
      if (key == "__metadata__") {
        if (!val.is_object()) return invalid_argument("%s: __metadata__ is not a JSON object", f);
        for (const auto& [mk, mv] : val.items()) {
          if (!mv.is_string())
            return invalid_argument("%s: __metadata__ key '%s' is not a string", f, mk.c_str());
          sf->metadata_[mk] = mv.get<std::string>();
        }
        continue;
      }
      tensor_entry e;
      uint64_t begin = 0, end = 0;
      HART_RETURN_IF_ERROR(parse_tensor(path, key, val, &e, &begin, &end));
      spans.push_back({begin, end, sf->tensors_.size()});
      sf->tensors_.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    return internal_error("%s: header JSON: %s", f, e.what());
  }

  // Truncation: the data section must reach the furthest tensor end.
  const span* last = nullptr;
  for (const span& s : spans) {
    if (last == nullptr || s.end > last->end) last = &s;
  }
  if (last != nullptr && last->end > data_bytes)
    return data_loss(
        "%s: truncated: tensor '%s' ends at data byte %llu but the data section has "
        "%llu bytes (file is %zu bytes, expected at least %llu)",
        f, sf->tensors_[last->idx].name.c_str(), (unsigned long long)last->end,
        (unsigned long long)data_bytes, file_bytes, (unsigned long long)(8 + header_bytes + last->end));

  // Overlap: sorted by begin, each non-empty span starts at or after the
  // furthest end seen so far. Empty tensors occupy no bytes.
  std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const span* prev = nullptr;
  for (const span& s : spans) {
    if (s.begin == s.end) continue;
    if (prev != nullptr && s.begin < prev->end)
      return invalid_argument(
          "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' "
          "[%llu, %llu]",
          f, sf->tensors_[s.idx].name.c_str(), (unsigned long long)s.begin, (unsigned long long)s.end,
          sf->tensors_[prev->idx].name.c_str(), (unsigned long long)prev->begin,
          (unsigned long long)prev->end);
    if (prev == nullptr || s.end > prev->end) prev = &s;
  }
  for (const span& s : spans) sf->tensors_[s.idx].data = data + s.begin;

  std::sort(sf->tensors_.begin(), sf->tensors_.end(),
            [](const tensor_entry& a, const tensor_entry& b) { return a.name < b.name; });
  return sf;
}

const tensor_entry* safetensors_file::find(std::string_view name) const {
  // tensors_ is sorted by name (open).
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const tensor_entry& e, std::string_view n) { return e.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

// -- weight_store ------------------------------------------------------------

status_or<weight_store> weight_store::open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return io_error("stat", path, errno);

  weight_store ws;
  // Adds every tensor of `file`; a name already present is an error naming both files.
  auto add_file = [&ws](std::shared_ptr<safetensors_file> file) -> status {
    for (const tensor_entry& e : file->tensors()) {
      auto [it, inserted] = ws.index_.emplace(e.name, &e);
      if (!inserted)
        return invalid_argument("tensor '%s' appears in both %s and %s", e.name.c_str(),
                                it->second->file.c_str(), e.file.c_str());
    }
    ws.files_.push_back(std::move(file));
    return {};
  };

  if (!S_ISDIR(st.st_mode)) {
    HART_ASSIGN_OR_RETURN(std::shared_ptr<safetensors_file> file, safetensors_file::open(path));
    HART_RETURN_IF_ERROR(add_file(std::move(file)));
    return ws;
  }

  const fs::path dir(path);
  const std::string index_path = (dir / "model.safetensors.index.json").string();
  if (is_regular_file(index_path)) {
    const char* ip = index_path.c_str();
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    std::string text;
    {
      FILE* fp = std::fopen(ip, "rb");
      if (fp == nullptr) return io_error("open", index_path, errno);
      char buf[1 << 16];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), fp)) > 0) text.append(buf, n);
      bool failed = std::ferror(fp) != 0;
      std::fclose(fp);
      if (failed) return failed_precondition("%s: read error", ip);
    }
    try {
      json j;
      try {
        j = json::parse(text);
      } catch (const json::parse_error& e) {
        return invalid_argument("%s: not valid JSON: %s", ip, e.what());
      }
      if (!j.is_object()) return invalid_argument("%s: not a JSON object", ip);
      auto it = j.find("weight_map");
      if (it == j.end() || !it->is_object())
        return invalid_argument("%s: missing object field 'weight_map'", ip);
      for (const auto& [name, shard] : it->items()) {
        if (!shard.is_string())
          return invalid_argument("%s: tensor '%s': shard is not a string", ip, name.c_str());
        weight_map[name] = shard.get<std::string>();
      }
    } catch (const std::exception& e) {
      return internal_error("%s: %s", ip, e.what());
    }

    // Each distinct shard is opened once, in name order.
    std::map<std::string, std::shared_ptr<safetensors_file>> shards;
    for (const auto& [name, shard] : weight_map) {
      if (shards.count(shard)) continue;
      if (!is_safe_relative(shard))
        return invalid_argument("%s: tensor '%s': shard '%s' is not a relative path inside %s", ip,
                                name.c_str(), shard.c_str(), path.c_str());
      const std::string shard_path = (dir / shard).string();
      if (!is_regular_file(shard_path))
        return not_found("%s: shard '%s' (holding tensor '%s') not found at %s", ip, shard.c_str(),
                         name.c_str(), shard_path.c_str());
      HART_ASSIGN_OR_RETURN(std::shared_ptr<safetensors_file> file, safetensors_file::open(shard_path));
      shards.emplace(shard, file);
      HART_RETURN_IF_ERROR(add_file(std::move(file)));
    }
    for (const auto& [name, shard] : weight_map) {
      const safetensors_file& file = *shards.at(shard);
      if (file.find(name) == nullptr)
        return not_found("%s: tensor '%s' is mapped to shard '%s', which does not contain it", ip,
                         name.c_str(), shard.c_str());
    }
    return ws;
  }

  const std::string single = (dir / "model.safetensors").string();
  if (is_regular_file(single)) return open(single);

  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string p = de.path().string();
    if (de.path().extension() == ".safetensors" && is_regular_file(p)) found.push_back(p);
  }
  if (ec) return failed_precondition("%s: cannot list directory: %s", path.c_str(), ec.message().c_str());
  if (found.empty())
    return not_found("%s: no model.safetensors.index.json, model.safetensors or *.safetensors", path.c_str());
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    std::string list;
    for (const auto& p : found) list += (list.empty() ? "" : ", ") + fs::path(p).filename().string();
    return invalid_argument("%s: %zu safetensors files without model.safetensors.index.json: %s",
                            path.c_str(), found.size(), list.c_str());
  }
  return open(found[0]);
}

const tensor_entry* weight_store::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> weight_store::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, e] : index_) out.push_back(name);
  return out;
}

// -- writer ------------------------------------------------------------------

status safetensors_write(const std::string& path, const std::vector<tensor_to_write>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const char* f = path.c_str();
  std::string header_text;
  try {
    json header = json::object();
    if (!metadata.empty()) {
      json m = json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      header["__metadata__"] = std::move(m);
    }
    uint64_t offset = 0;
    for (const tensor_to_write& t : tensors) {
      const char* n = t.name.c_str();
      if (t.name.empty() || t.name == "__metadata__")
        return invalid_argument("%s: tensor name '%s' is reserved or empty", f, n);
      if (header.contains(t.name)) return invalid_argument("%s: tensor '%s': written twice", f, n);
      for (int64_t d : t.shape) {
        if (d < 0)
          return invalid_argument("%s: tensor '%s': negative dimension in shape %s", f, n,
                                  shape_to_string(t.shape).c_str());
      }
      uint64_t need = 0;
      if (!checked_byte_count(t.shape, dtype_size(t.type), &need))
        return invalid_argument("%s: tensor '%s': shape %s overflows a 64-bit byte count", f, n,
                                shape_to_string(t.shape).c_str());
      if (need != t.n_bytes)
        return invalid_argument("%s: tensor '%s': n_bytes %zu but shape %s of %s needs %llu", f, n, t.n_bytes,
                                shape_to_string(t.shape).c_str(), std::string(dtype_name(t.type)).c_str(),
                                (unsigned long long)need);
      if (t.n_bytes > 0 && t.data == nullptr) return invalid_argument("%s: tensor '%s': data is null", f, n);
      header[t.name] = {{"dtype", std::string(dtype_name(t.type))},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + need}}};
      offset += need;
    }
    header_text = header.dump();
  } catch (const std::exception& e) {
    // dump() throws on names or metadata that are not valid UTF-8.
    return invalid_argument("%s: cannot encode header: %s", f, e.what());
  }
  // Spaces keep the data section 8-byte aligned; readers trim them as JSON whitespace.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  uint8_t len_le[8];
  uint64_t len = header_text.size();
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<uint8_t>(len >> (8 * i));

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", tmp, errno);
  status s = write_all(fd, len_le, sizeof(len_le), tmp);
  if (s.ok()) s = write_all(fd, header_text.data(), header_text.size(), tmp);
  for (size_t i = 0; s.ok() && i < tensors.size(); ++i)
    s = write_all(fd, tensors[i].data, tensors[i].n_bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = io_error("fsync", tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = io_error("close", tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), f) != 0) s = io_error("rename to final path", tmp, errno);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace hart
