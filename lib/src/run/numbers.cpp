#include "ampctl/run/numbers.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace ampctl::run {

nlohmann::json json_or_null(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

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

std::string short_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  // Counts and rates of 10^4 to 10^9 (samples/s, tokens/s) read best whole: "69060", not
  // "6.906e+04"; 4 significant digits everywhere else.
  const double a = std::fabs(v);
  if (a >= 1e4 && a < 1e9) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

std::string short_mean(std::optional<double> v) {
  return v ? short_number(*v) : "-";
}

std::string short_scale(double scale) {
  if (std::isfinite(scale) && scale > 0) {
    int exp = 0;
    // frexp: scale = m x 2^exp with m in [0.5, 1); a power of two has m = 0.5 exactly.
    if (std::frexp(scale, &exp) == 0.5) return "2^" + std::to_string(exp - 1);
  }
  return short_number(scale);
}

}  // namespace ampctl::run
