#include "ampctl/run/numbers.h"

#include <cmath>
#include <limits>
#include <string>

namespace ampctl::run {

nlohmann::json finite_or_null(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

std::optional<double> finite_number(const nlohmann::json& j) {
  if (!j.is_number()) return std::nullopt;
  const double v = j.get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

nlohmann::json encode_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return v;
}

std::optional<double> decode_double(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (!j.is_string()) return std::nullopt;
  const std::string s = j.get<std::string>();
  if (s == ".nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == ".inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

}  // namespace ampctl::run
