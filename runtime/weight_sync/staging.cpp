#include "runtime/weight_sync/staging.h"

#include "runtime/weight_sync/crc32c.h"

#include <iterator>

namespace hart::weight_sync {

status update_staging::fail(status s) {
  discard();
  return s;
}

void update_staging::reset() {
  for (auto& [name, t] : tensors_) {
    if (t.buffer) kept_[name] = std::move(t.buffer);
  }
  active_ = false;
  tensors_.clear();
  bytes_ = 0;
  allocated_ = 0;
  buckets_.clear();
  open_ = nullptr;
}

void update_staging::discard() {
  reset();
  kept_.clear();
}

uint64_t update_staging::staged_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, b] : kept_) n += b->n_bytes();
  for (const auto& [name, t] : tensors_) n += t.buffer ? t.buffer->n_bytes() : 0;
  return n;
}

status_or<std::shared_ptr<staged_buffer>> update_staging::buffer_for(const std::string& name, uint64_t n) {
  auto it = kept_.find(name);
  if (it != kept_.end()) {
    std::shared_ptr<staged_buffer> b = std::move(it->second);
    kept_.erase(it);
    // use_count 1: the engine has dropped the source that shared it.
    if (b->n_bytes() == n && b.use_count() == 1) return b;
  }
  return staged_buffer::create(size_t(n));
}

status update_staging::begin(const begin_msg& m, uint64_t serving_version) {
  reset();
  if (m.version <= serving_version) {
    return failed_precondition("version %llu is not above the serving version %llu",
                               (unsigned long long)m.version, (unsigned long long)serving_version);
  }
  if (m.n_tensors == 0 || m.n_tensors > limits_.max_tensors) {
    return invalid_argument("tensorCount %llu, expected 1..%llu", (unsigned long long)m.n_tensors,
                            (unsigned long long)limits_.max_tensors);
  }
  if (m.total_bytes > limits_.max_total_bytes) {
    return resource_exhausted("totalBytes %llu over this server's limit %llu",
                              (unsigned long long)m.total_bytes, (unsigned long long)limits_.max_total_bytes);
  }
  active_ = true;
  version_ = m.version;
  announced_ = m;
  return {};
}

status update_staging::begin_bucket(uint64_t version, uint64_t seq) {
  if (!active_ || version != version_) {
    return failed_precondition("no update %llu is staged (staged: %s)", (unsigned long long)version,
                               active_ ? std::to_string(version_).c_str() : "none");
  }
  auto [it, fresh] = buckets_.try_emplace(seq);
  if (!fresh) return fail(invalid_argument("bucket %llu arrived twice", (unsigned long long)seq));
  open_ = &it->second;
  return {};
}

status_or<uint8_t*> update_staging::place(uint64_t version, const chunk_desc& c) {
  if (!active_ || version != version_) {
    return failed_precondition("no update %llu is staged (staged: %s)", (unsigned long long)version,
                               active_ ? std::to_string(version_).c_str() : "none");
  }
  if (!open_) return failed_precondition("a chunk of tensor '%s' outside a bucket", c.name.c_str());
  auto it = tensors_.find(c.name);
  if (it == tensors_.end()) {
    if (tensors_.size() >= announced_.n_tensors) {
      return fail(invalid_argument("tensor '%s' is one more than the %llu announced", c.name.c_str(),
                                   (unsigned long long)announced_.n_tensors));
    }
    uint64_t numel = 1;
    for (int64_t d : c.shape) numel *= uint64_t(d);
    const uint64_t n = numel * dtype_size(c.type);
    // Allocation is bounded by what begin announced (and the server's limit checked there).
    if (n > announced_.total_bytes - allocated_) {
      return fail(invalid_argument("tensor '%s' (%llu bytes) does not fit the update's announced %llu bytes",
                                   c.name.c_str(), (unsigned long long)n,
                                   (unsigned long long)announced_.total_bytes));
    }
    pending_tensor t;
    t.type = c.type;
    t.shape = c.shape;
    auto buf = buffer_for(c.name, n);
    if (!buf.ok())
      return fail(resource_exhausted("no memory to stage tensor '%s' (%llu bytes)", c.name.c_str(),
                                     (unsigned long long)n));
    t.buffer = std::move(buf).value();
    allocated_ += n;
    it = tensors_.emplace(c.name, std::move(t)).first;
  }
  pending_tensor& t = it->second;
  if (t.type != c.type || t.shape != c.shape) {
    return fail(invalid_argument("chunk of tensor '%s' disagrees with its first chunk on dtype or shape",
                                 c.name.c_str()));
  }
  if (c.byte_offset > t.buffer->n_bytes() || c.n_bytes > t.buffer->n_bytes() - c.byte_offset) {
    return fail(invalid_argument("chunk of tensor '%s' runs past its %zu bytes", c.name.c_str(),
                                 t.buffer->n_bytes()));
  }
  // Chunks may come in any order (buckets over several connections) but never twice.
  const uint64_t lo = c.byte_offset, hi = c.byte_offset + c.n_bytes;
  auto next = t.ranges.lower_bound(lo);
  auto prev = next == t.ranges.begin() ? t.ranges.end() : std::prev(next);
  if ((next != t.ranges.end() && next->first < hi) ||
      (prev != t.ranges.end() && prev->first + prev->second > lo)) {
    return fail(invalid_argument("chunk of tensor '%s' at bytes [%llu, %llu) overlaps one already received",
                                 c.name.c_str(), (unsigned long long)lo, (unsigned long long)hi));
  }
  if (bytes_ + c.n_bytes > announced_.total_bytes) {
    return fail(invalid_argument("tensor '%s' brings the update past the announced %llu bytes",
                                 c.name.c_str(), (unsigned long long)announced_.total_bytes));
  }
  // Record [lo, hi), merged with its neighbours (in-order chunks keep one range).
  uint64_t start = lo, len = c.n_bytes;
  if (prev != t.ranges.end() && prev->first + prev->second == lo) {
    start = prev->first;
    len += prev->second;
    t.ranges.erase(prev);
  }
  if (next != t.ranges.end() && next->first == hi) {
    len += next->second;
    t.ranges.erase(next);
  }
  t.ranges[start] = len;
  t.received += c.n_bytes;
  bytes_ += c.n_bytes;
  return t.buffer->data() + lo;
}

status update_staging::add(uint64_t version, const chunk_desc& c, const void* bytes) {
  HART_ASSIGN_OR_RETURN(uint8_t * dst, place(version, c));
  open_->crc = copier_.copy(open_->crc, dst, bytes, c.n_bytes);  // one read of the frame
  open_->bytes += c.n_bytes;
  return {};
}

status update_staging::add_from_cuda(uint64_t version, const chunk_desc& c, cuda_ipc_reader& ipc) {
  HART_ASSIGN_OR_RETURN(uint8_t * dst, place(version, c));
  const status s =
      ipc.read(c.ipc_handle, c.ipc_offset, dst, c.n_bytes);  // outside the CRC: no transport crossed
  return s.ok() ? s : fail(s);
}

status update_staging::add_by_nccl(uint64_t version, const chunk_desc& c, nccl_group* group) {
  HART_ASSIGN_OR_RETURN(uint8_t * dst, place(version, c));
  if (!group) {
    return fail(
        failed_precondition("chunk '%s' comes by NCCL, but update %llu opened no NCCL group "
                            "(Begin.ncclUniqueId)",
                            c.name.c_str(), (unsigned long long)version));
  }
  const status s = group->receive(dst, c.n_bytes);  // outside the CRC, as IPC chunks
  return s.ok() ? s : fail(s);
}

status_or<std::unique_ptr<tensor_source>> update_staging::finish(const end_msg& m) {
  if (!active_ || m.version != version_) {
    return failed_precondition("no update %llu is staged", (unsigned long long)m.version);
  }
  // Buckets 0..n-1, each once (begin_bucket), then their CRCs in seq order.
  const uint64_t n = buckets_.size();
  if ((m.n_buckets != 0 && m.n_buckets != n) || (n > 0 && buckets_.rbegin()->first != n - 1)) {
    return fail(invalid_argument(
        "received %llu buckets (last seq %llu), end announced %llu; seqs run 0..n-1", (unsigned long long)n,
        (unsigned long long)(n ? buckets_.rbegin()->first : 0), (unsigned long long)m.n_buckets));
  }
  uint32_t crc = 0;
  for (const auto& [seq, b] : buckets_) crc = crc32c_combine(crc, b.crc, b.bytes);
  if (m.crc32c != crc) {
    return fail(
        data_loss("checksum mismatch: CRC-32C of the received bytes is %08x, end says %08x", crc, m.crc32c));
  }
  if (tensors_.size() != announced_.n_tensors || bytes_ != announced_.total_bytes) {
    return fail(invalid_argument("received %zu tensors / %llu bytes, begin announced %llu / %llu",
                                 tensors_.size(), (unsigned long long)bytes_,
                                 (unsigned long long)announced_.n_tensors,
                                 (unsigned long long)announced_.total_bytes));
  }
  auto src = std::make_unique<staged_tensor_source>("weight update " + std::to_string(version_));
  for (auto& [name, t] : tensors_) {
    if (t.received != t.buffer->n_bytes()) {
      return fail(invalid_argument("tensor '%s' is incomplete: %llu of %zu bytes", name.c_str(),
                                   (unsigned long long)t.received, t.buffer->n_bytes()));
    }
    tensor_entry e;
    e.name = name;
    e.type = t.type;
    e.shape = t.shape;
    e.data = t.buffer->data();
    e.n_bytes = t.buffer->n_bytes();
    e.file = src->describe();
    src->add(std::move(e), t.buffer);
  }
  kept_.clear();  // buffers of tensors this update did not carry: keep one update's worth at most
  reset();
  return std::unique_ptr<tensor_source>(std::move(src));
}

}  // namespace hart::weight_sync
