// File: runtime/core/wire_limits.h — limits shared by the Cap'n Proto decoders of outside
// frames (client, worker link, weight sync).
#pragma once

#include <algorithm>
#include <cstdint>

namespace hart {

/// The traversal budget for a message of `n_words`: a well-formed message is read a few times
/// over at most, so 8 passes (+1024 words) is plenty, and `cap` bounds it. It grows with the
/// frame, so a few bytes cannot make a decoder walk, and allocate for, millions of zero-size
/// list elements (Cap'n Proto charges each one word; found by fuzz/targets.h's worker_frames:
/// 64 bytes took a second and hundreds of MB under a fixed budget).
constexpr uint64_t traversal_budget_words(uint64_t n_words, uint64_t cap) {
  return std::min<uint64_t>(cap, 8 * n_words + 1024);
}

}  // namespace hart
