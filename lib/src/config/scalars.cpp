#include "ampctl/config/scalars.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace ampctl::config {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> options) {
  for (std::string_view o : options) {
    if (s == o) return true;
  }
  return false;
}

// [-+]?[0-9]+
bool int_syntax(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!is_digit(s[i])) return false;
  }
  return true;
}

// [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool float_syntax(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

std::optional<double> non_finite(std::string_view s) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (one_of(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})) return inf;
  if (one_of(s, {"-.inf", "-.Inf", "-.INF"})) return -inf;
  if (one_of(s, {".nan", ".NaN", ".NAN"})) return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

std::string_view without_plus(std::string_view s) {
  return (!s.empty() && s[0] == '+') ? s.substr(1) : s;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// Built by appends: GCC 12 reports a false -Wrestrict for "\"" + s + "\"".
std::string double_quoted(std::string_view s) {
  std::string out(1, '"');
  out += escaped(s);
  out += '"';
  return out;
}

}  // namespace

ReadStatus read_int(const Value& v, int64_t& out) {
  if (!v.is_scalar() || !v.plain || !int_syntax(v.text)) return ReadStatus::wrong_type;
  const std::string_view s = without_plus(v.text);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc::result_out_of_range) return ReadStatus::out_of_range;
  return (ec == std::errc{} && end == s.data() + s.size()) ? ReadStatus::ok
                                                           : ReadStatus::wrong_type;
}

ReadStatus read_float(const Value& v, double& out) {
  if (!v.is_scalar()) return ReadStatus::wrong_type;
  if (const auto special = non_finite(v.text)) {
    out = *special;
    return ReadStatus::ok;
  }
  if (!v.plain || !float_syntax(v.text)) return ReadStatus::wrong_type;
  const std::string_view s = without_plus(v.text);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc::result_out_of_range) return ReadStatus::out_of_range;
  return (ec == std::errc{} && end == s.data() + s.size()) ? ReadStatus::ok
                                                           : ReadStatus::wrong_type;
}

std::optional<bool> read_bool(const Value& v) {
  if (!v.is_scalar() || !v.plain) return std::nullopt;
  if (one_of(v.text, {"true", "True", "TRUE"})) return true;
  if (one_of(v.text, {"false", "False", "FALSE"})) return false;
  return std::nullopt;
}

bool is_plain_null(const Value& v) {
  return v.is_null() || (v.is_scalar() && v.plain && one_of(v.text, {"null", "Null", "NULL", "~"}));
}

std::string format_float(double x) {
  if (std::isnan(x)) return ".nan";
  if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  std::array<char, 64> buf{};
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  const std::string_view s(buf.data(), ec == std::errc{} ? end - buf.data() : 0);
  const std::string_view mantissa = s.substr(0, s.find('e'));
  if (mantissa.find('.') != std::string_view::npos) return std::string(s);
  return std::string(mantissa) + ".0" + std::string(s.substr(mantissa.size()));
}

std::string yaml_string(std::string_view s) {
  bool plain = !s.empty() && s.back() != ':' &&
               (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '/');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!(std::isalnum(c) || ch == '_' || ch == '-' || ch == '.' || ch == '/' || ch == '+' ||
          ch == ':')) {
      plain = false;
    }
  }
  // Words that some YAML reader (1.1 included) takes for a bool or null stay strings by quoting.
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (one_of(lower, {"y", "n", "yes", "no", "on", "off", "true", "false", "null"})) plain = false;
  return plain ? std::string(s) : double_quoted(s);
}

std::string describe(const Value& v) {
  switch (v.kind) {
    case Value::Kind::null:
      return "null";
    case Value::Kind::list:
      return "a list";
    case Value::Kind::map:
      return "a mapping";
    case Value::Kind::scalar:
      break;
  }
  constexpr size_t kMax = 40;
  const std::string_view cut = std::string_view(v.text).substr(0, kMax);
  std::string text = v.plain ? std::string() : std::string(1, '"');
  text += escaped(cut);
  if (v.text.size() > kMax) text += "...";
  if (!v.plain) text += '"';
  return text;
}

std::string utf8_problem(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) {
      len = 2, cp = b & 0x1fu;
    } else if (b >= 0xe0 && b <= 0xef) {
      len = 3, cp = b & 0x0fu;
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4, cp = b & 0x07u;
    }
    bool ok = len != 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xc0u) == 0x80u;
      cp = cp << 6 | (c & 0x3fu);
    }
    // Overlong 3- and 4-byte forms, UTF-16 surrogates and code points past U+10FFFF.
    if (ok && len == 3) ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
    if (ok && len == 4) ok = cp >= 0x10000 && cp <= 0x10ffff;
    if (!ok) {
      char buf[80];
      std::snprintf(buf, sizeof buf, "must be valid UTF-8 (byte 0x%02x at offset %zu is not)", b,
                    i);
      return buf;
    }
    i += len;
  }
  return {};
}

}  // namespace ampctl::config
