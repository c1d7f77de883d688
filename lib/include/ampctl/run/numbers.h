// Numbers in the run directory's JSON files. JSON has no spelling for inf or NaN, so
//   * metrics lines and summary.json write a non-finite value as null (a reader sees "no value");
//   * the checkpoint's metrics object, which must read back exactly, writes it as ".inf",
//     "-.inf" or ".nan" (the spelling the config's JSON form uses for its floats too, so a
//     checkpoint reads the same either way), here and nowhere else in the run directory.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ampctl::run {

// v, or null when v is not finite.
nlohmann::json finite_or_null(double v);

// The value, or null when there is none.
nlohmann::json json_or_null(const std::optional<double>& v);

// j as a finite number; nullopt when it is absent, not a number, or not finite.
std::optional<double> finite_number(const nlohmann::json& j);

// v exactly: a number, or ".inf" / "-.inf" / ".nan".
nlohmann::json encode_double(double v);
// What encode_double wrote (a number or one of the non-finite spellings); nullopt otherwise.
std::optional<double> decode_double(const nlohmann::json& j);

// The console's one short format for a number: 4 significant digits ("2.303", "0.001",
// "3.7e-05", "1.049e+09"), whole from 10^4 to 10^9 ("69060"); "inf", "-inf", "nan" when not
// finite.
std::string short_number(double v);
// A mean over values of which none was finite: "-" (no value), else short_number(v).
std::string short_mean(std::optional<double> v);
// A loss scale: "2^k" for a power of two (the scales the pytorch rule keeps), else
// short_number.
std::string short_scale(double scale);

}  // namespace ampctl::run
