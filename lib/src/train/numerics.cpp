#include "ampctl/train/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/nn/numerics.h"
#include "ampctl/run/numbers.h"
#include "ampctl/run/numerics.h"

namespace ampctl::train {
namespace k = run::numerics_key;
namespace {

// Shifts searched for the advice: far beyond any useful scale (2^+-300 covers every f32 value).
constexpr int kMaxShift = 300;

double frac(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

int zero_limit_log2(DType lowp) {
  return lowp == DType::bf16 ? numerics::kBf16ZeroLimit : numerics::kHalfZeroLimit;
}

int64_t NumericsSample::total(numerics::Counter c) const {
  int64_t sum = 0;
  for (size_t t = 0; t < names.size(); ++t) sum += row(t)[c];
  return sum;
}

int64_t NumericsSample::nonzero(size_t t) const {
  int64_t sum = 0;
  for (int b = 0; b < numerics::kBins; ++b) sum += row(t)[numerics::kHist0 + b];
  return sum;
}

int64_t NumericsSample::nonzero() const {
  int64_t sum = 0;
  for (size_t t = 0; t < names.size(); ++t) sum += nonzero(t);
  return sum;
}

double NumericsSample::underflow_frac() const {
  return frac(total(numerics::kUnderflow), nonzero());
}

std::optional<double> NumericsSample::headroom_log2(size_t t) const {
  const auto bits = static_cast<uint32_t>(row(t)[numerics::kMaxBits]);
  if (bits == 0) return std::nullopt;  // every value zero (or non-finite): nothing to measure
  float m;
  static_assert(sizeof m == sizeof bits);
  std::memcpy(&m, &bits, sizeof m);
  return ampctl::headroom_log2(max_finite(lowp), static_cast<double>(m));
}

std::optional<double> NumericsSample::min_headroom_log2() const {
  std::optional<double> best;
  for (size_t t = 0; t < names.size(); ++t) {
    const std::optional<double> h = headroom_log2(t);
    if (h && (!best || *h < *best)) best = h;
  }
  return best;
}

int64_t NumericsSample::underflow_at_shift(int shift) const {
  // x * 2^shift rounds to zero exactly when ceil(log2 |x|) <= zero_limit - shift.
  const int last_bin = zero_limit_log2(lowp) - shift + numerics::kBinOffset;
  int64_t sum = 0;
  for (size_t t = 0; t < names.size(); ++t) {
    const int64_t* hist = row(t) + numerics::kHist0;
    for (int b = 0; b < numerics::kBins && b <= last_bin; ++b) sum += hist[b];
  }
  return sum;
}

std::optional<NumericsSample::Shifts> NumericsSample::allowed_shifts() const {
  const int64_t values = nonzero();
  if (values == 0) return std::nullopt;
  Shifts s;
  s.lo = kMaxShift;
  for (int shift = -kMaxShift; shift <= kMaxShift; ++shift) {
    if (static_cast<double>(underflow_at_shift(shift)) <
        kAdviceUnderflowFrac * static_cast<double>(values)) {
      s.lo = shift;
      break;
    }
  }
  if (const std::optional<double> h = min_headroom_log2()) {
    s.hi = static_cast<int>(std::floor(*h));
  }
  return s;
}

nlohmann::json numerics_line(const NumericsSample& s) {
  nlohmann::json tensors = nlohmann::json::object();
  for (size_t t = 0; t < s.names.size(); ++t) {
    const int64_t* r = s.row(t);
    const std::optional<double> h = s.headroom_log2(t);
    tensors[s.names[t]] = {{k::kValues, r[numerics::kValues]},
                           {k::kUnderflow, r[numerics::kUnderflow]},
                           {k::kSubnormal, r[numerics::kSubnormal]},
                           {k::kHeadroom, h ? nlohmann::json(*h) : nlohmann::json()}};
  }
  const int64_t values = s.total(numerics::kValues);
  const int64_t nonzero = s.nonzero();
  const int64_t under = s.total(numerics::kUnderflow);
  const int64_t sub = s.total(numerics::kSubnormal);
  const std::optional<double> mh = s.min_headroom_log2();
  // nlohmann's object keeps keys sorted; the fields are the same set in any order.
  return {{"kind", k::kKind},
          {k::kStep, s.step},
          {k::kScale, run::finite_or_null(s.scale)},
          {k::kValues, values},
          {k::kUnderflow, under},
          {k::kSubnormal, sub},
          {k::kUnderflowFrac, frac(under, nonzero)},
          {k::kSubnormalFrac, frac(sub, nonzero)},
          {k::kMinHeadroom, mh ? nlohmann::json(*mh) : nlohmann::json()},
          {k::kTensors, std::move(tensors)}};
}

void NumericsSummary::add(const NumericsSample& s) {
  if (m_names.empty()) {
    m_names = s.names;
    m_tensor_values.assign(s.names.size(), 0);
    m_tensor_nonzero.assign(s.names.size(), 0);
    m_tensor_underflow.assign(s.names.size(), 0);
  }
  ++m_samples;
  m_values += s.total(numerics::kValues);
  m_nonzero += s.nonzero();
  m_underflow += s.total(numerics::kUnderflow);
  m_frac_sum += s.underflow_frac();
  for (size_t t = 0; t < s.names.size() && t < m_names.size(); ++t) {
    m_tensor_values[t] += s.row(t)[numerics::kValues];
    m_tensor_nonzero[t] += s.nonzero(t);
    m_tensor_underflow[t] += s.row(t)[numerics::kUnderflow];
  }
  if (const std::optional<double> h = s.min_headroom_log2()) {
    if (!m_min_headroom || *h < *m_min_headroom) m_min_headroom = h;
  }
  const std::optional<NumericsSample::Shifts> shifts = s.allowed_shifts();
  if (!shifts || !(s.scale > 0) || !std::isfinite(s.scale)) return;
  ++m_advised;
  if (shifts->hi && *shifts->hi < shifts->lo) m_empty = true;
  const double lo = std::ldexp(s.scale, shifts->lo);
  if (!m_lo || lo > *m_lo) m_lo = lo;
  if (shifts->hi) {
    const double hi = std::ldexp(s.scale, *shifts->hi);
    if (!m_hi || hi < *m_hi) m_hi = hi;
  }
  if (m_hi && *m_lo > *m_hi) m_empty = true;
}

nlohmann::json NumericsSummary::numerics_json() const {
  std::vector<size_t> order;
  for (size_t t = 0; t < m_names.size(); ++t) {
    if (m_tensor_underflow[t] > 0) order.push_back(t);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return frac(m_tensor_underflow[a], m_tensor_nonzero[a]) >
           frac(m_tensor_underflow[b], m_tensor_nonzero[b]);
  });
  if (order.size() > 5) order.resize(5);
  nlohmann::json worst = nlohmann::json::array();
  for (size_t t : order) {
    worst.push_back({{k::kTensor, m_names[t]},
                     {k::kUnderflow, m_tensor_underflow[t]},
                     {k::kValues, m_tensor_values[t]},
                     {k::kUnderflowFrac, frac(m_tensor_underflow[t], m_tensor_nonzero[t])}});
  }
  return {
      {k::kSamples, m_samples},
      {k::kValues, m_values},
      {k::kUnderflow, m_underflow},
      {k::kUnderflowFrac, frac(m_underflow, m_nonzero)},
      {k::kMeanUnderflowFrac, m_samples > 0 ? m_frac_sum / static_cast<double>(m_samples) : 0.0},
      {k::kMinHeadroom, m_min_headroom ? nlohmann::json(*m_min_headroom) : nlohmann::json()},
      {k::kWorstUnderflow, std::move(worst)}};
}

nlohmann::json NumericsSummary::advice_json() const {
  if (m_advised == 0) {
    return {{k::kMin, nullptr}, {k::kMax, nullptr}, {k::kNote, "no sample counted a rounding"}};
  }
  if (m_empty) {
    return {
        {k::kMin, nullptr},
        {k::kMax, nullptr},
        {k::kNote, "no single scale avoided both overflow and >= 1% underflow in every sample"}};
  }
  return {{k::kMin, *m_lo}, {k::kMax, m_hi ? nlohmann::json(*m_hi) : nlohmann::json()}};
}

std::string underflow_warning(const NumericsSample& s) {
  const double f = s.underflow_frac();
  if (!(f > kWarnUnderflowFrac)) return {};
  size_t worst = 0;
  double worst_frac = -1;
  for (size_t t = 0; t < s.names.size(); ++t) {
    const double tf = frac(s.row(t)[numerics::kUnderflow], s.nonzero(t));
    if (tf > worst_frac) {
      worst = t;
      worst_frac = tf;
    }
  }
  std::string msg = "numerics: step " + std::to_string(s.step) + ": " + sci(100.0 * f) +
                    "% of the non-zero gradient values flushed to zero at scale " + sci(s.scale) +
                    " (most in " + s.names[worst] + ": " + sci(100.0 * worst_frac) + "%); ";
  const std::optional<NumericsSample::Shifts> shifts = s.allowed_shifts();
  if (shifts && (!shifts->hi || shifts->lo <= *shifts->hi)) {
    msg += "this step would have had < 1% underflow and no overflow at a scale in [" +
           sci(std::ldexp(s.scale, shifts->lo)) + ", " +
           (shifts->hi ? sci(std::ldexp(s.scale, *shifts->hi)) : std::string("inf")) +
           "]: raise scaler.init_scale or shorten scaler.growth_interval";
  } else {
    msg += "no scale avoids both underflow and overflow here: consider bf16";
  }
  return msg;
}

NumericsRecorder::NumericsRecorder(Backend& backend, nn::GradNumerics& numerics,
                                   const amp::GradScaler& scaler, std::vector<std::string> names,
                                   int64_t every)
    : m_backend(&backend), m_numerics(&numerics), m_scaler(&scaler), m_every(every) {
  m_scale = backend.zeros({1}, DType::f32);
  m_sample.names = std::move(names);
  m_sample.lowp = numerics.lowp();
  m_sample.counters.reserve(m_sample.names.size() * numerics::kWidth);
}

void NumericsRecorder::begin() {
  if (m_scaler->is_enabled()) {
    m_backend->copy(m_scale, m_scaler->scale_tensor());
  } else {
    m_backend->fill(m_scale, 1.0);
  }
  m_numerics->begin(true);
}

void NumericsRecorder::end() {
  m_numerics->end();
}

const NumericsSample& NumericsRecorder::read(int64_t step) {
  m_numerics->read(m_sample.counters);
  m_sample.step = step;
  m_sample.scale = m_backend->read_scalar_f32(m_scale);
  m_summary.add(m_sample);
  return m_sample;
}

}  // namespace ampctl::train
