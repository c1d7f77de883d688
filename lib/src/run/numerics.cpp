#include "ampctl/run/numerics.h"

#include "ampctl/run/numbers.h"

namespace ampctl::run {

std::optional<NumericsRecord> read_numerics_line(const nlohmann::json& line) {
  namespace k = numerics_key;
  if (!line.is_object() || line.value("kind", std::string()) != k::kKind) return std::nullopt;
  const std::optional<double> step = finite_number(line.value(k::kStep, nlohmann::json()));
  const std::optional<double> frac = finite_number(line.value(k::kUnderflowFrac, nlohmann::json()));
  if (!step || !frac) return std::nullopt;
  NumericsRecord r;
  r.step = static_cast<int64_t>(*step);
  r.underflow_frac = *frac;
  r.min_headroom_log2 = finite_number(line.value(k::kMinHeadroom, nlohmann::json()));
  return r;
}

}  // namespace ampctl::run
