#include "ampctl/run/numbers.h"

#include <cmath>

#include "ampctl/config/document.h"
#include "ampctl/config/scalars.h"

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
  if (!std::isfinite(v)) return config::format_float(v);
  return v;
}

std::optional<double> decode_double(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (!j.is_string()) return std::nullopt;
  // The config's reader of a quoted scalar: it takes exactly the non-finite spellings.
  config::Value v;
  v.kind = config::Value::Kind::scalar;
  v.text = j.get<std::string>();
  v.plain = false;
  double out = 0;
  if (config::read_float(v, out) != config::ReadStatus::ok || std::isfinite(out)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace ampctl::run
