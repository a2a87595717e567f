#include "runtime/core/utf8.h"

namespace hart {
namespace {

constexpr std::string_view k_replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

int utf8_next(const unsigned char* s, size_t n) {
  unsigned char b = s[0];
  if (b < 0x80) return 1;
  int need = b < 0xC2 ? 0 : b <= 0xDF ? 1 : b <= 0xEF ? 2 : b <= 0xF4 ? 3 : 0;
  if (need == 0) return -1;
  unsigned char lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
  unsigned char hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF)) return -k;
  }
  return need + 1;
}

size_t utf8_append_lossy(std::string& out, std::string_view bytes, bool final) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size(), i = 0, run = 0;  // [run, i) is valid and not yet appended
  while (i < n) {
    int len = utf8_next(s + i, n - i);
    if (len > 0) {
      i += static_cast<size_t>(len);
      continue;
    }
    out.append(bytes.data() + run, i - run);
    if (len == 0 && !final) return i;
    out.append(k_replacement);
    i += len == 0 ? n - i : static_cast<size_t>(-len);
    run = i;
  }
  out.append(bytes.data() + run, i - run);
  return i;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  utf8_append_lossy(out, bytes, true);
  return out;
}

}  // namespace hart
