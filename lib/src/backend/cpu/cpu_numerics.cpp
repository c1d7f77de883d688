// The CPU backend's counted rounding (backend.h, "gradient numerics"): one sequential pass, the
// classification of math/numerics_math.h, the counters added at the end. It runs on sampled steps
// only, so it is kept plain rather than vectorised.
#include <array>
#include <cstring>

#include "cpu_backend.h"

namespace ampctl::cpu {

void CpuBackend::round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) {
  check_round_counted(src, dst, counters, device());
  const float* x = src.data_as<float>();
  const bool is_half = dst.dtype() == DType::f16;
  auto* out = static_cast<uint16_t*>(dst.data());
  numerics::Partial p;
  std::array<int64_t, numerics::kBins> hist{};
  for (size_t i = 0; i < src.numel(); ++i) {
    const uint16_t bits = is_half ? float_to_half_bits(x[i]) : float_to_bf16_bits(x[i]);
    out[i] = bits;
    const int bin = numerics::classify(x[i], bits, is_half, p);
    if (bin >= 0) ++hist[static_cast<size_t>(bin)];
  }
  auto* c = static_cast<int64_t*>(counters.data());  // aligned: checked
  c[numerics::kValues] += p.values;
  c[numerics::kUnderflow] += p.underflow;
  c[numerics::kSubnormal] += p.subnormal;
  c[numerics::kNonfinite] += p.nonfinite;
  if (static_cast<int64_t>(p.max_bits) > c[numerics::kMaxBits]) c[numerics::kMaxBits] = p.max_bits;
  for (int b = 0; b < numerics::kBins; ++b) c[numerics::kHist0 + b] += hist[static_cast<size_t>(b)];
}

}  // namespace ampctl::cpu
