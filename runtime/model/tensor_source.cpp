#include "runtime/model/tensor_source.h"

namespace hart {
namespace {

class checkpoint_source : public tensor_source {
 public:
  checkpoint_source(weight_store store, std::string dir) : store_(std::move(store)), dir_(std::move(dir)) {}

  std::vector<const tensor_entry*> tensors() const override {
    std::vector<const tensor_entry*> out;
    for (const std::string& n : store_.names()) out.push_back(store_.find(n));
    return out;
  }
  const std::string& describe() const override { return dir_; }

 private:
  weight_store store_;
  std::string dir_;
};

}  // namespace

status_or<std::unique_ptr<tensor_source>> checkpoint_source_open(const std::string& dir) {
  HART_ASSIGN_OR_RETURN(weight_store store, weight_store::open(dir));
  return std::unique_ptr<tensor_source>(new checkpoint_source(std::move(store), dir));
}

bool memory_source_dtype_ok(dtype t) {
  return t == dtype::bf16 || t == dtype::f16 || t == dtype::f32 || t == dtype::i32 || t == dtype::i64;
}

status memory_tensor_source::add(const std::string& name, dtype type, std::vector<int64_t> shape,
                                 std::vector<uint8_t> bytes) {
  if (name.empty()) return invalid_argument("%s: tensor with an empty name", description_.c_str());
  if (entries_.count(name))
    return invalid_argument("%s: tensor '%s' given twice", description_.c_str(), name.c_str());
  if (!memory_source_dtype_ok(type)) {
    return invalid_argument("%s: tensor '%s' has dtype %s; accepted: BF16, F16, F32, I32, I64",
                            description_.c_str(), name.c_str(), std::string(dtype_name(type)).c_str());
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return invalid_argument("%s: tensor '%s' has a negative dimension", description_.c_str(), name.c_str());
    numel *= d;
  }
  if (uint64_t(numel) * dtype_size(type) != bytes.size()) {
    return invalid_argument("%s: tensor '%s' has %zu bytes, its shape and dtype need %llu",
                            description_.c_str(), name.c_str(), bytes.size(),
                            (unsigned long long)(uint64_t(numel) * dtype_size(type)));
  }
  auto o = std::make_unique<owned>();
  o->bytes = std::move(bytes);
  o->entry.name = name;
  o->entry.type = type;
  o->entry.shape = std::move(shape);
  o->entry.data = o->bytes.data();
  o->entry.n_bytes = o->bytes.size();
  o->entry.file = description_;
  n_bytes_ += o->bytes.size();
  entries_.emplace(name, std::move(o));
  return {};
}

std::vector<const tensor_entry*> memory_tensor_source::tensors() const {
  std::vector<const tensor_entry*> out;
  out.reserve(entries_.size());
  for (const auto& [name, o] : entries_) out.push_back(&o->entry);
  return out;
}

}  // namespace hart
