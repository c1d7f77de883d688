// Numbers in the run directory's JSON files. JSON has no spelling for inf or NaN, so
//   * metrics lines and summary.json write a non-finite value as null (a reader sees "no value");
//   * the checkpoint's metrics object, which must read back exactly, writes it as the config's
//     YAML spelling (".inf", "-.inf", ".nan": config::format_float), the one encoding of
//     non-finite numbers in the project, and reads it back with the config's float reader.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace ampctl::run {

// v, or null when v is not finite.
nlohmann::json finite_or_null(double v);
// j as a finite number; nullopt when it is absent, not a number, or not finite.
std::optional<double> finite_number(const nlohmann::json& j);

// v exactly: a number, or ".inf" / "-.inf" / ".nan".
nlohmann::json encode_double(double v);
// What encode_double wrote (a number or one of the non-finite spellings); nullopt otherwise.
std::optional<double> decode_double(const nlohmann::json& j);

}  // namespace ampctl::run
