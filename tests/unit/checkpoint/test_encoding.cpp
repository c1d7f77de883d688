// base64 against RFC 4648's vectors and random round trips; the strict decoder's refusals;
// CRC-32 against its check value and a bitwise reference implementation.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ampctl/checkpoint/encoding.h"
#include "ampctl/core/error.h"

namespace ampctl::checkpoint {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

TEST(Base64, Rfc4648TestVectors) {
  // RFC 4648 section 10.
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(bytes_of(plain)), encoded) << "encode '" << plain << "'";
    EXPECT_EQ(base64_decode(encoded), bytes_of(plain)) << "decode '" << encoded << "'";
  }
}

TEST(Base64, AllByteValuesUseTheStandardAlphabet) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  const std::string text = base64_encode(all);
  EXPECT_EQ(text.substr(0, 8), "AAECAwQF");
  EXPECT_EQ(text.substr(text.size() - 8), "/P3+/w==") << "'+' and '/' (not the URL alphabet)";
  EXPECT_EQ(base64_decode(text), all);
}

TEST(Base64, RandomRoundTripsOfEveryLength0To64) {
  std::mt19937_64 rng(20240611);
  for (size_t len = 0; len <= 64; ++len) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint8_t> bytes(len);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      const std::string text = base64_encode(bytes);
      ASSERT_EQ(text.size(), (len + 2) / 3 * 4) << "length " << len;
      ASSERT_EQ(base64_decode(text), bytes) << "length " << len << " text " << text;
    }
  }
}

void expect_refused(const std::string& text, const std::string& needle) {
  try {
    base64_decode(text, "t.data");
    ADD_FAILURE() << "'" << text << "' decoded, expected a refusal mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << text;
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t.data: invalid base64"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << text << "': " << msg;
  }
}

TEST(Base64, StrictDecoderRefusesBadInput) {
  expect_refused("Zg=", "not a multiple of 4");
  expect_refused("Zm9vY", "not a multiple of 4");
  expect_refused("Zm9v\n", "not a multiple of 4");
  expect_refused("Zm9*", "'*' at offset 3");
  expect_refused("Zm 9", "' ' at offset 2");
  expect_refused("Zm-_", "'-' at offset 2");  // the URL-safe alphabet is not ours
  expect_refused(std::string("Zm\x01v", 4), "byte 0x01 at offset 2");
  expect_refused("Zm=v", "padding is only allowed at the end");
  expect_refused("Zg==Zm9v", "padding is only allowed at the end");
  expect_refused("Z===", "padding is only allowed at the end");
  expect_refused("====", "padding is only allowed at the end");
  // Non-zero spare bits: "Zh==" and "Zm9=" would otherwise decode to "f" and "fo" too.
  expect_refused("Zh==", "non-zero bits before the padding");
  expect_refused("Zm9=", "non-zero bits before the padding");
}

// Bit-at-a-time CRC-32 (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF): the
// definition, computed without zlib's tables.
uint32_t reference_crc32(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

TEST(Crc32, CheckValue) {
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32(bytes_of("")), 0u);
  EXPECT_EQ(crc32_hex(crc32(bytes_of("123456789"))), "cbf43926");
}

TEST(Crc32, MatchesBitwiseReferenceOnRandomData) {
  std::mt19937_64 rng(99);
  for (size_t len : {1, 2, 3, 7, 64, 1000, 4097}) {
    std::vector<uint8_t> bytes(len);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(crc32(bytes), reference_crc32(bytes)) << "length " << len;
  }
}

TEST(Crc32, HexFormIsEightLowercaseDigits) {
  EXPECT_EQ(crc32_hex(0), "00000000");
  EXPECT_EQ(crc32_hex(0x1A2B3C4Du), "1a2b3c4d");
  uint32_t v = 0;
  EXPECT_TRUE(parse_crc32_hex("1a2b3c4d", v));
  EXPECT_EQ(v, 0x1A2B3C4Du);
  for (const char* bad : {"1A2B3C4D", "1a2b3c4", "1a2b3c4d0", "", "1a2b3c4g", "0x1a2b3c"}) {
    EXPECT_FALSE(parse_crc32_hex(bad, v)) << bad;
  }
}

}  // namespace
}  // namespace ampctl::checkpoint
