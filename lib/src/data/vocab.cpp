#include "ampctl/data/vocab.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "ampctl/core/error.h"

namespace ampctl::data {

namespace {

constexpr int64_t kByteVocab = 256;

// The string of byte b in a byte vocabulary (see vocab.h).
std::string byte_string(int b) {
  if (b >= 0x20 && b <= 0x7e) return std::string(1, static_cast<char>(b));
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

bool is_surrogate(int32_t cp) {
  return cp >= 0xd800 && cp <= 0xdfff;
}

}  // namespace

int32_t next_code_point(std::string_view text, size_t* pos) {
  const size_t i = *pos;
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  int len = 0;
  int32_t cp = 0, min = 0;
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  } else if ((b0 & 0xe0) == 0xc0) {
    len = 2, cp = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, cp = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;  // a continuation byte, or 0xf8..0xff
  }
  if (i + static_cast<size_t>(len) > text.size()) return -1;
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(i + static_cast<size_t>(k));
    if ((b & 0xc0) != 0x80) return -1;
    cp = cp << 6 | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || is_surrogate(cp)) return -1;
  *pos = i + static_cast<size_t>(len);
  return cp;
}

std::string utf8_of(int32_t cp) {
  std::string out;
  const auto u = static_cast<uint32_t>(cp);
  if (u < 0x80) {
    out += static_cast<char>(u);
  } else if (u < 0x800) {
    out += static_cast<char>(0xc0 | u >> 6);
    out += static_cast<char>(0x80 | (u & 0x3f));
  } else if (u < 0x10000) {
    out += static_cast<char>(0xe0 | u >> 12);
    out += static_cast<char>(0x80 | (u >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (u & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | u >> 18);
    out += static_cast<char>(0x80 | (u >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (u >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (u & 0x3f));
  }
  return out;
}

std::string describe_code_point(int32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  std::string out = buf;
  if (cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0)) out += " '" + utf8_of(cp) + "'";
  return out;
}

Vocab Vocab::bytes() {
  Vocab v;
  v.m_kind = VocabKind::byte;
  return v;
}

Vocab Vocab::characters(std::vector<int32_t> code_points) {
  if (code_points.empty()) {
    throw Error{ErrorKind::invalid_argument, "Vocab::characters: no code points"};
  }
  for (size_t i = 0; i < code_points.size(); ++i) {
    const int32_t cp = code_points[i];
    if (cp < 0 || cp > 0x10ffff || is_surrogate(cp) || (i > 0 && cp <= code_points[i - 1])) {
      throw Error{ErrorKind::invalid_argument,
                  "Vocab::characters: code points must be valid, sorted and distinct"};
    }
  }
  Vocab v;
  v.m_kind = VocabKind::character;
  v.m_code_points = std::move(code_points);
  return v;
}

Vocab Vocab::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_array() || json.empty()) {
    throw Error{ErrorKind::input, origin + ": the vocabulary must be a non-empty array of strings"};
  }
  for (size_t i = 0; i < json.size(); ++i) {
    if (!json[i].is_string()) {
      throw Error{ErrorKind::input,
                  origin + ": vocabulary entry " + std::to_string(i) + " is not a string"};
    }
  }
  if (static_cast<int64_t>(json.size()) == kByteVocab) {
    bool all = true;
    for (int b = 0; b < kByteVocab && all; ++b) {
      all = json[static_cast<size_t>(b)].get<std::string>() == byte_string(b);
    }
    if (all) return bytes();
  }
  std::vector<int32_t> cps;
  cps.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    const std::string s = json[i].get<std::string>();
    size_t pos = 0;
    const int32_t cp = s.empty() ? -1 : next_code_point(s, &pos);
    if (cp < 0 || pos != s.size()) {
      throw Error{ErrorKind::input, origin + ": vocabulary entry " + std::to_string(i) +
                                        " is not one character (nor a byte vocabulary's)"};
    }
    if (!cps.empty() && cp <= cps.back()) {
      throw Error{ErrorKind::input, origin + ": vocabulary entry " + std::to_string(i) + " (" +
                                        describe_code_point(cp) +
                                        ") is out of order: a character vocabulary is sorted "
                                        "by code point, each character once"};
    }
    cps.push_back(cp);
  }
  return characters(std::move(cps));
}

int64_t Vocab::size() const {
  return m_kind == VocabKind::byte ? kByteVocab : static_cast<int64_t>(m_code_points.size());
}

std::string Vocab::token_string(int64_t id) const {
  if (id < 0 || id >= size()) {
    throw Error{ErrorKind::invalid_argument, "Vocab: token " + std::to_string(id) +
                                                 " is out of range [0, " + std::to_string(size()) +
                                                 ")"};
  }
  if (m_kind == VocabKind::byte) return byte_string(static_cast<int>(id));
  return utf8_of(m_code_points[static_cast<size_t>(id)]);
}

nlohmann::json Vocab::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < size(); ++i) out.push_back(token_string(i));
  return out;
}

int32_t Vocab::id_of(int32_t cp) const {
  const auto it = std::lower_bound(m_code_points.begin(), m_code_points.end(), cp);
  if (it == m_code_points.end() || *it != cp) return -1;
  return static_cast<int32_t>(it - m_code_points.begin());
}

std::vector<int32_t> Vocab::encode(std::string_view text, const std::string& what) const {
  std::vector<int32_t> ids;
  if (m_kind == VocabKind::byte) {
    ids.reserve(text.size());
    for (const char c : text) ids.push_back(static_cast<uint8_t>(c));
    return ids;
  }
  for (size_t pos = 0; pos < text.size();) {
    const size_t at = pos;
    const int32_t cp = next_code_point(text, &pos);
    if (cp < 0) {
      throw Error{ErrorKind::input, what + ": byte " + std::to_string(at) +
                                        ": not valid UTF-8 (a character vocabulary reads UTF-8)"};
    }
    const int32_t id = id_of(cp);
    if (id < 0) {
      throw Error{ErrorKind::input, what + ": byte " + std::to_string(at) + ": the character " +
                                        describe_code_point(cp) + " is not in the vocabulary (" +
                                        std::to_string(size()) + " characters)"};
    }
    ids.push_back(id);
  }
  return ids;
}

std::string Vocab::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= size()) token_string(id);  // throws, naming the id
    if (m_kind == VocabKind::byte) {
      out += static_cast<char>(static_cast<uint8_t>(id));
    } else {
      out += utf8_of(m_code_points[static_cast<size_t>(id)]);
    }
  }
  return out;
}

}  // namespace ampctl::data
