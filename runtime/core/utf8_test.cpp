// utf8_lossy / utf8_append_lossy by hand: valid text kept byte for byte, each maximal
// ill-formed subpart one U+FFFD (Unicode §3.9's examples), a truncated tail held back unless final.
#include "runtime/core/utf8.h"

#include <gtest/gtest.h>

namespace hart {
namespace {

const std::string k_fffd = "\xEF\xBF\xBD";

TEST(utf8, valid_text_is_kept) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  EXPECT_EQ(utf8_lossy(s), s);
}

TEST(utf8, each_maximal_ill_formed_subpart_is_one_replacement) {
  EXPECT_EQ(utf8_lossy("\xFF"), k_fffd);
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), k_fffd + k_fffd);               // overlong: two subparts
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), k_fffd + k_fffd + k_fffd);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "x"),
            k_fffd + "x");                                                       // cut short by an ASCII byte
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), k_fffd + k_fffd + k_fffd + k_fffd);  // > U+10FFFF
}

TEST(utf8, a_truncated_tail_waits_unless_final) {
  std::string out;
  EXPECT_EQ(utf8_append_lossy(out, "ok\xE2\x82", false), 2u);
  EXPECT_EQ(out, "ok");
  out.clear();
  EXPECT_EQ(utf8_append_lossy(out, "ok\xE2\x82", true), 4u);
  EXPECT_EQ(out, "ok" + k_fffd);
}

}  // namespace
}  // namespace hart
