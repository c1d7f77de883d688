// YAML 1.2 core-schema scalars, read strictly and written so they read back identically.
//
// Reading: a plain (unquoted, untagged) scalar is an integer when it matches [-+]?[0-9]+, a
// float when it matches [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)? or is one of
// .inf/.Inf/.INF (optionally signed) and .nan/.NaN/.NAN, a bool when it is true/True/TRUE/
// false/False/FALSE. YAML 1.1's yes/no/on/off, 0x/0o integers and 1_000 are not numbers or
// bools. Quoted scalars are strings, with one exception: a float also accepts the quoted
// spellings of inf and nan, because JSON has no literal for them (to_json writes ".inf").
//
// Writing: floats in the shortest form that reads back to the same double, always with a '.'
// in the mantissa ("1.0", "1.0e-08"), so YAML 1.1 readers (PyYAML) also see floats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ampctl/config/document.h"

namespace ampctl::config {

enum class ReadStatus { ok, wrong_type, out_of_range };

ReadStatus read_int(const Value& v, int64_t& out);
ReadStatus read_float(const Value& v, double& out);  // integers are accepted as floats
std::optional<bool> read_bool(const Value& v);
bool is_plain_null(const Value& v);  // null, or a plain null/Null/NULL/~ scalar

// "" for valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF); else "must be valid
// UTF-8 (byte 0xNN at offset K is not)".
std::string utf8_problem(std::string_view s);

std::string format_float(double x);  // "65536.0", "1.0e-08", ".inf", "-.inf", ".nan"
// The string as a YAML scalar: plain when it reads back as the same string, else double-quoted.
std::string yaml_string(std::string_view s);
// A short rendering of a value for "got ..." in messages: the scalar as written (quoted ones in
// quotes, long ones cut), "null", "a list" or "a mapping".
std::string describe(const Value& v);

}  // namespace ampctl::config
