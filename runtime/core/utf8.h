// File: runtime/core/utf8.h — UTF-8 validation and lossy repair (Unicode §3.9): what the
// tokenizer's decoders and the wire's text fields share.
//
//   std::string safe = utf8_lossy(message);   // every ill-formed subpart is now U+FFFD
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hart {

/// Length of the UTF-8 sequence at s[0..n), n >= 1: > 0 valid; 0 a valid prefix cut off by the
/// end of the buffer; -k ill-formed, k being the maximal ill-formed subpart. Only the second
/// byte has a narrowed range (no overlongs, surrogates or code points > U+10FFFF).
int utf8_next(const unsigned char* s, size_t n);

/// Appends `bytes` to `out` with each maximal ill-formed subpart replaced by U+FFFD (as Rust's
/// from_utf8_lossy). Unless `final`, stops before a truncated sequence at the end. Returns the
/// number of bytes consumed.
size_t utf8_append_lossy(std::string& out, std::string_view bytes, bool final);

/// `bytes` as valid UTF-8 (utf8_append_lossy, final).
std::string utf8_lossy(std::string_view bytes);

}  // namespace hart
