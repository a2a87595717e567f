#include "runtime/protocol/capnp_frame.h"

#include "runtime/core/wire_limits.h"

#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <cstring>
#include <new>

namespace hart::protocol {

status capnp_frame_read(const void* data, size_t size, const capnp_frame_limits& limits,
                        kj::FunctionParam<status(capnp::MessageReader&)> read) {
  const char* name = limits.name;
  if (size == 0 || data == nullptr) return invalid_argument("%s: empty frame", name);
  if (size > limits.max_bytes)
    return invalid_argument("%s: %zu bytes, limit %zu", name, size, limits.max_bytes);
  if (size % sizeof(capnp::word) != 0)
    return invalid_argument("%s: %zu bytes is not a multiple of 8", name, size);
  try {
    kj::Array<capnp::word> owned;
    kj::ArrayPtr<const capnp::word> words;
    const size_t n_words = size / sizeof(capnp::word);
    if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
      words = kj::arrayPtr(static_cast<const capnp::word*>(data), n_words);
    } else {
      owned = kj::heapArray<capnp::word>(n_words);
      std::memcpy(owned.begin(), data, size);
      words = owned.asPtr();
    }
    capnp::ReaderOptions opts;
    opts.traversalLimitInWords = traversal_budget_words(n_words, limits.traversal_limit_words);
    opts.nestingLimit = limits.nesting_limit;
    capnp::FlatArrayMessageReader reader(words, opts);
    if (reader.getEnd() != words.end()) {
      return invalid_argument("%s: %zu trailing bytes after the message", name,
                              static_cast<size_t>(words.end() - reader.getEnd()) * sizeof(capnp::word));
    }
    return read(reader);
  } catch (const kj::Exception& e) {
    return invalid_argument("%s: malformed Cap'n Proto message: %s", name, e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("%s: out of memory while decoding", name);
  }
}

status_or<std::vector<uint8_t>> capnp_frame_write(const char* name, size_t first_segment_words,
                                                  kj::FunctionParam<status(capnp::MessageBuilder&)> fill) {
  try {
    capnp::MallocMessageBuilder mb(static_cast<unsigned>(first_segment_words));
    HART_RETURN_IF_ERROR(fill(mb));
    std::vector<uint8_t> out(capnp::computeSerializedSizeInWords(mb) * sizeof(capnp::word));
    kj::ArrayOutputStream os(kj::arrayPtr(out.data(), out.size()));
    capnp::writeMessage(os, mb);
    return out;
  } catch (const kj::Exception& e) {
    return invalid_argument("%s: %s", name, e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("%s: out of memory", name);
  }
}

}  // namespace hart::protocol
