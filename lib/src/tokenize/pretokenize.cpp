#include "ampctl/tokenize/pretokenize.h"

#include <array>
#include <cstdint>

#include "ampctl/tokenize/unicode.h"

namespace ampctl::tokenize {

namespace {

// The classes the patterns name: \p{L}, \p{N}, \s, and the rest ([^\s\p{L}\p{N}]).
enum class Cls : unsigned char { letter, number, space, other };

struct Char {
  char32_t cp = 0;
  size_t len = 0;  // bytes; 0 past the end
  Cls cls = Cls::other;
};

class Cursor {
 public:
  explicit Cursor(std::string_view text) : m_text(text) {}
  size_t size() const { return m_text.size(); }
  Char at(size_t pos) const {
    Char c;
    if (pos >= m_text.size()) return c;
    const auto b = static_cast<unsigned char>(m_text[pos]);
    if (b < 0x80) {
      c.cp = b;
      c.len = 1;
      c.cls = kAscii[b];
      return c;
    }
    c.cp = decode_utf8(m_text, pos, &c.len);
    c.cls = is_letter(c.cp)        ? Cls::letter
            : is_number(c.cp)      ? Cls::number
            : is_white_space(c.cp) ? Cls::space
                                   : Cls::other;
    return c;
  }
  // The end of the run of characters of class `cls` from `pos` (at most `max` of them).
  size_t run(size_t pos, Cls cls, size_t max = SIZE_MAX) const {
    for (size_t n = 0; n < max; ++n) {
      const Char c = at(pos);
      if (c.len == 0 || c.cls != cls) break;
      pos += c.len;
    }
    return pos;
  }
  bool is_cr_lf(size_t pos) const {
    return pos < m_text.size() && (m_text[pos] == '\r' || m_text[pos] == '\n');
  }
  char byte(size_t pos) const { return pos < m_text.size() ? m_text[pos] : '\0'; }

 private:
  static constexpr auto kAscii = [] {
    std::array<Cls, 128> t{};
    for (int b = 0; b < 128; ++b) {
      t[b] = ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') ? Cls::letter
             : (b >= '0' && b <= '9')                 ? Cls::number
             : (b == ' ' || (b >= 0x09 && b <= 0x0d)) ? Cls::space
                                                      : Cls::other;
    }
    return t;
  }();
  std::string_view m_text;
};

// 's 't 're 've 'm 'll 'd at `pos` (which holds '\''): the end, or 0. Case-insensitive for
// Llama 3 / Qwen2 ((?i:...): ASCII case, and U+017F LONG S, which case-folds to s).
size_t contraction(const Cursor& c, size_t pos, bool ignore_case) {
  const auto lower = [&](size_t p) -> char {
    const char b = c.byte(p);
    if (!ignore_case) return b;
    if (b >= 'A' && b <= 'Z') return static_cast<char>(b | 0x20);
    if (static_cast<unsigned char>(b) == 0xc5 &&
        static_cast<unsigned char>(c.byte(p + 1)) == 0xbf) {
      return '\x01';  // U+017F
    }
    return b;
  };
  const char a = lower(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  if (a == '\x01') return pos + 3;
  const char b = lower(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return 0;
}

// The end of the white-space run from `pos` (`pos` holds white space).
// \s+(?!\S): the whole run at the end of the text, else all but its last character (that one
// then starts the next word), which fails for a run of one; \s+: the whole run.
size_t space_word(const Cursor& c, size_t pos, size_t run_end) {
  if (run_end >= c.size()) return run_end;
  size_t last = pos, len = 0;  // start of the run's last character
  for (size_t p = pos; p < run_end; p += len) {
    last = p;
    len = c.at(p).len;
  }
  return last > pos ? last : run_end;
}

size_t next_gpt2(const Cursor& c, size_t pos) {
  const Char ch = c.at(pos);
  if (ch.cp == '\'') {
    if (const size_t end = contraction(c, pos, false)) return end;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  size_t start = pos;
  Cls cls = ch.cls;
  if (ch.cp == ' ') {
    const Char next = c.at(pos + 1);
    if (next.len != 0 && next.cls != Cls::space) {
      start = pos + 1;
      cls = next.cls;
    }
  }
  if (cls != Cls::space) return c.run(start, cls);
  return space_word(c, pos, c.run(pos, Cls::space));
}

size_t next_llama(const Cursor& c, size_t pos, size_t max_digits) {
  const Char ch = c.at(pos);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (ch.cp == '\'') {
    if (const size_t end = contraction(c, pos, true)) return end;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+: letters, with one character before them that is neither CR, LF,
  // a letter nor a number (a space, a tab, a quote...).
  if (ch.cls == Cls::letter) return c.run(pos, Cls::letter);
  if (ch.cls != Cls::number && ch.cp != '\r' && ch.cp != '\n' &&
      c.at(pos + ch.len).cls == Cls::letter && c.at(pos + ch.len).len != 0) {
    return c.run(pos + ch.len, Cls::letter);
  }
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
  if (ch.cls == Cls::number) return c.run(pos, Cls::number, max_digits);
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t start = pos;
  if (ch.cp == ' ') {
    const Char next = c.at(pos + 1);
    if (next.len != 0 && next.cls == Cls::other) start = pos + 1;
  }
  if (c.at(start).cls == Cls::other) {
    size_t end = c.run(start, Cls::other);
    while (c.is_cr_lf(end)) ++end;
    return end;
  }
  // Here `ch` is white space.
  const size_t run_end = c.run(pos, Cls::space);
  // \s*[\r\n]+: up to the run's last CR or LF (\s* gives back all after it; [\r\n]+ then takes
  // that one character only, since the ones after it are not CR or LF).
  size_t last_cr_lf = SIZE_MAX;
  for (size_t p = pos, len = 0; p < run_end; p += len) {
    len = c.at(p).len;
    if (c.is_cr_lf(p)) last_cr_lf = p;
  }
  if (last_cr_lf != SIZE_MAX) return last_cr_lf + 1;
  return space_word(c, pos, run_end);
}

}  // namespace

std::optional<Pattern> pattern_of_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return Pattern::gpt2;
  if (regex == kLlama3Regex) return Pattern::llama3;
  if (regex == kQwen2Regex) return Pattern::qwen2;
  return std::nullopt;
}

const char* pattern_name(Pattern pattern) {
  switch (pattern) {
    case Pattern::gpt2:
      return "gpt2";
    case Pattern::llama3:
      return "llama3";
    case Pattern::qwen2:
      return "qwen2";
  }
  return "?";
}

void split_words(Pattern pattern, std::string_view text, std::vector<std::string_view>& words) {
  const Cursor c(text);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = pattern == Pattern::gpt2     ? next_gpt2(c, pos)
                       : pattern == Pattern::llama3 ? next_llama(c, pos, 3)
                                                    : next_llama(c, pos, 1);
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace ampctl::tokenize
