// base64 (RFC 4648) and CRC-32 (zlib) for checkpoint tensors; see encoding.h.
#include "ampctl/checkpoint/encoding.h"

#include <zlib.h>

#include <array>
#include <cstdio>

#include "ampctl/core/error.h"

namespace ampctl::checkpoint {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kInvalid = -1;

constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = kInvalid;
  for (int i = 0; i < 64; ++i)
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecode = make_decode_table();

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  char buf[16];
  if (u >= 0x20 && u < 0x7f) {
    std::snprintf(buf, sizeof buf, "'%c'", c);
  } else {
    std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
  }
  return buf;
}

}  // namespace

std::string base64_encode(const void* data, size_t size) {
  const auto* in = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = size - i;
  if (rest == 1) {
    const uint32_t v = uint32_t{in[i]} << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what) {
  auto fail = [&](const std::string& problem) {
    return Error{ErrorKind::input, what + ": invalid base64: " + problem};
  };
  if (text.size() % 4 != 0) {
    throw fail("length " + std::to_string(text.size()) + " is not a multiple of 4");
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t body = text.size() - padding;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  for (size_t i = 0; i < body; ++i) {
    const int8_t v = kDecode[static_cast<unsigned char>(text[i])];
    if (v == kInvalid) {
      throw fail(describe_char(text[i]) + " at offset " + std::to_string(i) +
                 (text[i] == '=' ? " (padding is only allowed at the end)" : ""));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out.push_back(static_cast<uint8_t>(acc >> 16));
      out.push_back(static_cast<uint8_t>(acc >> 8));
      out.push_back(static_cast<uint8_t>(acc));
      acc = 0;
    }
  }
  // The last quantum: 2 characters carry 1 byte (4 spare bits), 3 carry 2 bytes (2 spare bits);
  // the spare bits must be zero or two texts would decode to the same bytes.
  if (padding == 2) {
    if (acc & 0xf)
      throw fail("non-zero bits before the padding at offset " + std::to_string(body - 1));
    out.push_back(static_cast<uint8_t>(acc >> 4));
  } else if (padding == 1) {
    if (acc & 0x3)
      throw fail("non-zero bits before the padding at offset " + std::to_string(body - 1));
    out.push_back(static_cast<uint8_t>(acc >> 10));
    out.push_back(static_cast<uint8_t>(acc >> 2));
  }
  return out;
}

uint32_t crc32(const void* data, size_t size) {
  // zlib takes uInt lengths: feed it in chunks so multi-GiB tensors are safe.
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = size < kChunk ? size : kChunk;
    crc = ::crc32(crc, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

bool parse_crc32_hex(std::string_view text, uint32_t& crc) {
  if (text.size() != 8) return false;
  uint32_t v = 0;
  for (char c : text) {
    uint32_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return false;
    }
    v = (v << 4) | d;
  }
  crc = v;
  return true;
}

}  // namespace ampctl::checkpoint
