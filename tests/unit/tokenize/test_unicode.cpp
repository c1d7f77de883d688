// The Unicode pieces: UTF-8 validation (each malformed kind, with its offset), the classes the
// regexes use (spot values from the Unicode Character Database, checked by hand against
// UnicodeData.txt's categories and PropList.txt's White_Space), NFC on the textbook cases of
// UAX #15 (composition, singletons, exclusions, canonical ordering, blocking, Hangul), GPT-2's
// byte alphabet against the values bytes_to_unicode gives (Ġ for the space, Ċ for LF).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "ampctl/tokenize/tokenizer.h"
#include "ampctl/tokenize/unicode.h"

namespace ampctl::tokenize {
namespace {

TEST(Unicode, TablesComeFromTheGeneratedUnicodeVersion) {
  EXPECT_STREQ(unicode_version(), "14.0.0");
}

TEST(Unicode, Utf8ErrorOffsets) {
  EXPECT_EQ(utf8_error_offset("plain ascii"), std::nullopt);
  EXPECT_EQ(utf8_error_offset("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"), std::nullopt);
  EXPECT_EQ(utf8_error_offset("ab\x80"), 2u);                          // stray continuation
  EXPECT_EQ(utf8_error_offset("abcdefghij\xc3"), 10u);                 // truncated
  EXPECT_EQ(utf8_error_offset("x\xc0\xaf"), 1u);                       // overlong '/'
  EXPECT_EQ(utf8_error_offset("x\xe0\x80\xaf"), 1u);                   // overlong, 3 bytes
  EXPECT_EQ(utf8_error_offset("xy\xed\xa0\x80"), 2u);                  // surrogate D800
  EXPECT_EQ(utf8_error_offset("\xf4\x90\x80\x80"), 0u);                // beyond U+10FFFF
  EXPECT_EQ(utf8_error_offset("12345678\xc3\x28"), 8u);                // bad second byte
  EXPECT_EQ(utf8_error_offset(std::string("a\0b", 3)), std::nullopt);  // NUL is UTF-8
}

TEST(Unicode, Classes) {
  for (const char32_t c : {U'a', U'Z', U'\u00e9', U'\u00aa', U'\u01c5', U'\u02b0', U'\u4e2d',
                           U'\u05d0', U'\U00020000', U'\u017f'}) {
    EXPECT_TRUE(is_letter(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (const char32_t c : {U'0', U'\u0301', U'_', U'\U0001F600', U'\u200d', U' ', U'\u2163'}) {
    EXPECT_FALSE(is_letter(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (const char32_t c : {U'7', U'\u0664', U'\u00b2', U'\u2163', U'\u00bd', U'\uff11'}) {
    EXPECT_TRUE(is_number(c)) << std::hex << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_number(U'a'));
  std::set<char32_t> white = {0x09, 0x0a,   0x0b,   0x0c,   0x0d,   0x20,   0x85,
                              0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
  for (char32_t c = 0x2000; c <= 0x200a; ++c) white.insert(c);
  for (char32_t c = 0; c < 0x3100; ++c) {
    EXPECT_EQ(is_white_space(c), white.count(c) == 1) << std::hex << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_white_space(0x1c));    // Python's isspace says yes; White_Space says no
  EXPECT_FALSE(is_white_space(0x200b));  // ZERO WIDTH SPACE is Cf
  EXPECT_FALSE(is_white_space(0xfeff));
}

TEST(Unicode, CombiningClasses) {
  EXPECT_EQ(combining_class(U'a'), 0);
  EXPECT_EQ(combining_class(0x0301), 230);
  EXPECT_EQ(combining_class(0x0323), 220);
  EXPECT_EQ(combining_class(0x0345), 240);
  EXPECT_EQ(combining_class(0x05b0), 10);
}

TEST(Unicode, Nfc) {
  EXPECT_EQ(nfc("plain"), "plain");
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");  // composes
  EXPECT_EQ(nfc("\u00e9"), "\u00e9");   // stays
  EXPECT_EQ(nfc("\u212b"), "\u00c5");   // singleton: ANGSTROM SIGN
  EXPECT_EQ(nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");          // composition exclusion
  EXPECT_EQ(nfc("s\u0323\u0307"), "\u1e69");         // dot below, dot above
  EXPECT_EQ(nfc("s\u0307\u0323"), "\u1e69");         // reordered first
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00e1\u0301");   // the second is blocked
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");    // Hangul L V T
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");          // LV + T
  EXPECT_EQ(nfc("\u0301x"), "\u0301x");              // leading mark stays
  EXPECT_EQ(nfc("\u1e9b\u0323"), "\u1e9b\u0323");    // UAX #15's example
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");  // no composite: reordered
  EXPECT_EQ(nfc("\U0001F469\u200d\U0001F4BB"), "\U0001F469\u200d\U0001F4BB");
}

TEST(ByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10au);  // 'Ċ'
  EXPECT_EQ(byte_to_unicode(0), 0x100u);
  EXPECT_EQ(byte_to_unicode('!'), U'!');
  EXPECT_EQ(byte_to_unicode(0xad), 0x143u);  // the soft hyphen is not printable here
  EXPECT_EQ(byte_to_unicode(0xff), 0xffu);
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_unicode(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second);
    EXPECT_EQ(unicode_to_byte(c), b);
    EXPECT_LT(c, 0x144u);
  }
  EXPECT_EQ(unicode_to_byte(0x144), -1);
  EXPECT_EQ(unicode_to_byte(0x4e2d), -1);
}

TEST(Fnv1a64, KnownValues) {
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a64_hex("a"), "af63dc4c8601ec8c");
}

}  // namespace
}  // namespace ampctl::tokenize
