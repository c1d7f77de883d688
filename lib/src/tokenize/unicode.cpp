#include "ampctl/tokenize/unicode.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace ampctl::tokenize {

namespace {

struct CodeRange {
  char32_t lo, hi;
};
struct CodeClass {
  char32_t cp;
  int ccc;
};
struct CodeDecomposition {
  char32_t cp;
  int offset, length;
};
struct CodeComposition {
  char32_t first, second, composite;
};

#include "unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t cp) {
  const auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                                   [](char32_t c, const CodeRange& r) { return c < r.lo; });
  return it != std::begin(table) && cp <= std::prev(it)->hi;
}

// Hangul syllables compose and decompose by arithmetic (Unicode, section 3.12).
constexpr char32_t kSBase = 0xac00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11a7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose_into(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xc0) {
    const auto it =
        std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), cp,
                         [](const CodeDecomposition& d, char32_t c) { return d.cp < c; });
    if (it != std::end(kDecomposition) && it->cp == cp) {
      out.insert(out.end(), kDecompositionData + it->offset,
                 kDecompositionData + it->offset + it->length);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (first, second), or 0.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto it = std::lower_bound(
      std::begin(kComposition), std::end(kComposition), CodeComposition{first, second, 0},
      [](const CodeComposition& a, const CodeComposition& b) {
        return a.first != b.first ? a.first < b.first : a.second < b.second;
      });
  if (it != std::end(kComposition) && it->first == first && it->second == second) {
    return it->composite;
  }
  return 0;
}

// NFC of one segment: a run that starts at an NFC boundary and holds no other.
void nfc_segment(const std::vector<char32_t>& cps, std::vector<char32_t>& d, std::string& out) {
  d.clear();
  for (const char32_t cp : cps) decompose_into(cp, d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(
        d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
        [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (UAX #15's algorithm): a character joins the last starter unless a
  // character between them has a class >= its own (blocked).
  if (!d.empty()) {
    size_t starter = 0, write = 1;
    int last_class = combining_class(d[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < d.size(); ++i) {
      const char32_t ch = d[i];
      const int cls = combining_class(ch);
      const char32_t composite = last_class == 256 ? 0 : compose_pair(d[starter], ch);
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) {
        starter = write;
        if (last_class == 256) last_class = 0;
      }
      last_class = cls;
      d[write++] = ch;
    }
    d.resize(write);
  }
  for (const char32_t cp : d) append_utf8(out, cp);
}

}  // namespace

const char* unicode_version() {
  return kUnicodeVersion;
}

std::optional<size_t> utf8_error_offset(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: most text is ASCII.
    while (i + 8 <= n) {
      uint64_t word = 0;
      std::copy(s + i, s + i + 8, reinterpret_cast<unsigned char*>(&word));
      if ((word & 0x8080808080808080ull) != 0) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char b0 = s[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    char32_t min = 0;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      len = 2, min = 0x80;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3, min = 0x800;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    char32_t cp = b0 & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::nullopt;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetter, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumber, cp);
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
  return in_ranges(kWhiteSpace, cp);
}

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto it = std::lower_bound(std::begin(kCombiningClass), std::end(kCombiningClass), cp,
                                   [](const CodeClass& c, char32_t v) { return c.cp < v; });
  return it != std::end(kCombiningClass) && it->cp == cp ? it->ccc : 0;
}

bool nfc_boundary_before(char32_t cp) {
  return cp < 0x300 || !in_ranges(kNfcUnsafe, cp);
}

std::string nfc(std::string_view text) {
  // Nothing below U+0300 is unsafe: skip to the first byte that may start one (0xcc and up).
  size_t first = 0;
  for (; first < text.size(); ++first) {
    if (static_cast<unsigned char>(text[first]) >= 0xcc) break;
  }
  bool any = false;
  for (size_t pos = first, len = 0; pos < text.size(); pos += len) {
    if (!nfc_boundary_before(decode_utf8(text, pos, &len))) {
      any = true;
      break;
    }
  }
  if (!any) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> segment, scratch;
  size_t segment_start = 0;  // byte offset of the segment in `text`
  auto flush = [&](size_t end) {
    if (segment.size() == 1 && nfc_boundary_before(segment[0])) {
      out.append(text.substr(segment_start, end - segment_start));  // alone, it is NFC
    } else if (!segment.empty()) {
      nfc_segment(segment, scratch, out);
    }
    segment.clear();
    segment_start = end;
  };
  for (size_t pos = 0, len = 0; pos < text.size(); pos += len) {
    const char32_t cp = decode_utf8(text, pos, &len);
    if (nfc_boundary_before(cp)) flush(pos);
    segment.push_back(cp);
  }
  flush(text.size());
  return out;
}

}  // namespace ampctl::tokenize
