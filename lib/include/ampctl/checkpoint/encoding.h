// The byte encodings a checkpoint is made of: base64 (RFC 4648 section 4, the standard alphabet
// with '=' padding) for tensor data inside JSON, and CRC-32 (IEEE 802.3, the polynomial and
// bit order of zlib's crc32()) to detect damaged tensor data.
//
// The decoder is strict, so that one text has exactly one meaning: the length must be a multiple
// of 4, only the 64 alphabet characters may appear before the padding, padding is "=" or "==" at
// the very end, and the unused low bits of the last quantum must be zero (RFC 4648 section 3.5,
// "canonical encoding"). No whitespace or line breaks are accepted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ampctl::checkpoint {

std::string base64_encode(const void* data, size_t size);
inline std::string base64_encode(const std::vector<uint8_t>& bytes) {
  return base64_encode(bytes.data(), bytes.size());
}

// Throws Error{input} "`what`: invalid base64: ..." naming the offending character and offset.
std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what = "base64");

// CRC-32/ISO-HDLC (zlib's crc32); crc32("123456789") == 0xCBF43926.
uint32_t crc32(const void* data, size_t size);
inline uint32_t crc32(const std::vector<uint8_t>& bytes) {
  return crc32(bytes.data(), bytes.size());
}

// The form a checkpoint stores: exactly 8 lowercase hex digits ("cbf43926").
std::string crc32_hex(uint32_t crc);
// Parses that form; false for anything else (upper case, wrong length, non-hex).
bool parse_crc32_hex(std::string_view text, uint32_t& crc);

}  // namespace ampctl::checkpoint
