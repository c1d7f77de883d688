// The CPU backend's numerics family (backend.h, "numerics"). round_counted: the classification
// of math/numerics_math.h over the pool's threads, the counters added at the end of each part;
// it runs on sampled steps only, so it is kept scalar rather than vectorised. round_amax: one
// vector pass (avx512 and avx2 paths). gemm_round_amax and gemm_batched_round_amax: the max taken
// in the packed kernels' epilogue (cpu_gemm.h, AmaxSink), on the floats the epilogue rounds into c.
// causal_softmax_backward_amax: both roundings' max in the op's one pass.
// activation_backward_amax: relu's max in its one pass; the GELU's share in chunks of
// kAmaxChunk elements, the op's f32 output into a stack buffer (L1) and round_amax's pass from
// there.
#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "cpu_backend.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {
namespace {

// The accumulator tensor's two words (math/numerics_math.h) as an AmaxSink that the parts of an
// op merge into, lock-free, and written back once after them.
class AmaxAccumulator {
 public:
  explicit AmaxAccumulator(const Tensor& amax) : m_words(amax.data_as<float>()) {
    sink.max_bits.store(float_bits(m_words[0]));
    sink.nonfinite.store(m_words[1] != 0.0f);
  }
  void write_back() const {
    m_words[0] = bits_float(sink.max_bits.load());
    m_words[1] = sink.nonfinite.load() ? 1.0f : 0.0f;
  }
  AmaxSink sink;

 private:
  float* m_words;
};

}  // namespace

void CpuBackend::round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) {
  check_round_counted(src, dst, counters, device());
  const float* x = src.data_as<float>();
  const bool is_half = dst.dtype() == DType::f16;
  auto* out = static_cast<uint16_t*>(dst.data());
  auto* c = static_cast<int64_t*>(counters.data());  // aligned: checked
  // Split over the pool's threads; each part counts into its own partials and adds them under a
  // lock. Integer sums and a max: the counters do not depend on the split or the order.
  std::mutex merge;
  parallel_for(*m_pool, src.numel(), [&](size_t b, size_t e) {
    numerics::Partial p;
    std::array<int64_t, numerics::kBins> hist{};
    for (size_t i = b; i < e; ++i) {
      const uint16_t bits = is_half ? float_to_half_bits(x[i]) : float_to_bf16_bits(x[i]);
      out[i] = bits;
      const int bin = numerics::classify(x[i], bits, is_half, p);
      if (bin >= 0) ++hist[static_cast<size_t>(bin)];
    }
    const std::lock_guard<std::mutex> lock(merge);
    c[numerics::kValues] += p.values;
    c[numerics::kUnderflow] += p.underflow;
    c[numerics::kSubnormal] += p.subnormal;
    c[numerics::kNonfinite] += p.nonfinite;
    if (static_cast<int64_t>(p.max_bits) > c[numerics::kMaxBits]) {
      c[numerics::kMaxBits] = p.max_bits;
    }
    for (int k = 0; k < numerics::kBins; ++k)
      c[numerics::kHist0 + k] += hist[static_cast<size_t>(k)];
  });
}

// Every step of a fp16/bf16 run: the rounding and the max in one pass (vectorised on the
// avx512 and avx2 paths), the parts merging into one AmaxSink. A max of float bits: the result does
// not depend on the split.
void CpuBackend::round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) {
  check_round_amax(src, dst, amax, device());
  const float* x = src.data_as<float>();
  const bool is_half = dst.dtype() == DType::f16;
  auto* out = static_cast<uint16_t*>(dst.data());
  AmaxAccumulator acc(amax);
  parallel_for(*m_pool, src.numel(), [&](size_t b, size_t e) {
    uint32_t m = 0;
    bool bad = false;
    if (m_packed) {
      vec::cast_amax(x, out, dst.dtype(), b, e, m, bad);
    } else {
      for (size_t i = b; i < e; ++i) {
        out[i] = is_half ? float_to_half_bits(x[i]) : float_to_bf16_bits(x[i]);
        const uint32_t ab = float_bits(x[i]) & 0x7fffffffu;
        const bool inf = ab >= 0x7f800000u;
        bad = bad || inf;
        m = std::max(m, inf ? 0u : ab);
      }
    }
    acc.sink.merge(m, bad);
  });
  acc.write_back();
}

void CpuBackend::gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                 const Tensor& c, const Tensor& amax, const Tensor& scratch) {
  const GemmDims d = check_gemm_round_amax(a, trans_a, b, trans_b, c, amax, scratch, device());
  if (m_packed && d.m > 0 && d.n > 0 && d.k > 0 && !overlaps(c, a) && !overlaps(c, b)) {
    AmaxAccumulator acc(amax);
    GemmOutput gc{c.data(), c.dtype(), d.n};
    gc.amax = &acc.sink;
    const GemmOperand ga{a.data(), a.dtype(), a.dim(1), trans_a};
    const GemmOperand gb{b.data(), b.dtype(), b.dim(1), trans_b};
    if (m_gemm.run(d.m, d.n, d.k, ga, gb, gc, *m_pool, m_bf16_dot)) {
      acc.write_back();
      return;
    }
  }
  Backend::gemm_round_amax(a, trans_a, b, trans_b, c, amax, scratch);
}

void CpuBackend::gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b,
                                         bool trans_b, const Tensor& c, const Tensor& amax,
                                         const Tensor& scratch) {
  const GemmBatchedDims d =
      check_gemm_batched_round_amax(a, trans_a, b, trans_b, c, amax, scratch, device());
  if (m_packed && d.batch > 0 && d.m > 0 && d.n > 0 && d.k > 0) {
    AmaxAccumulator acc(amax);
    gemm_batched_packed(d, a, trans_a, b, trans_b, c, 1.0f, 0.0f, &acc.sink);
    acc.write_back();
    return;
  }
  Backend::gemm_batched_round_amax(a, trans_a, b, trans_b, c, amax, scratch);
}

void CpuBackend::activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                          const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                          const Tensor& scratch) {
  check_activation_backward_amax(kind, x, y, dy, dx, amax, scratch, device());
  const bool relu = kind == nn::ActivationKind::relu;
  const bool gelu = kind == nn::ActivationKind::gelu_tanh;
  const Tensor& used = relu ? y : x;
  // activation_backward's vectorised kinds, on the operands it takes them for.
  if (!m_packed || !(relu || gelu) || !same_or_disjoint(dy, dx) || overlaps(used, dx)) {
    Backend::activation_backward_amax(kind, x, y, dy, dx, amax, scratch);
    return;
  }
  constexpr size_t kAmaxChunk = 2048;  // 8 KiB of floats
  const size_t us = dtype_size(used.dtype()), ds = dtype_size(dy.dtype());
  const auto* up = static_cast<const char*>(used.data());
  const auto* dyp = static_cast<const char*>(dy.data());
  auto* out = static_cast<char*>(dx.data());
  AmaxAccumulator acc(amax);
  parallel_for(*m_pool, dy.numel(), [&](size_t b, size_t e) {
    alignas(64) float buf[kAmaxChunk];
    uint32_t m = 0;
    bool bad = false;
    if (relu) {  // one pass: the float it rounds is dy or 0
      vec::relu_backward_amax(up, used.dtype(), dyp, dy.dtype(), out, dx.dtype(), b, e, m, bad);
    } else {
      for (size_t c = b; c < e; c += kAmaxChunk) {
        const size_t len = std::min(kAmaxChunk, e - c);
        vec::gelu_tanh_backward(up + c * us, used.dtype(), dyp + c * ds, dy.dtype(), buf,
                                DType::f32, 0, len);
        vec::cast_amax(buf, out + c * 2, dx.dtype(), 0, len, m, bad);
      }
    }
    acc.sink.merge(m, bad);
  });
  acc.write_back();
}

void CpuBackend::causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs,
                                              const Tensor& scale, const Tensor& dscores,
                                              const Tensor& amax, const Tensor& scratch) {
  const SoftmaxDims d =
      check_causal_softmax_backward_amax(probs, dprobs, scale, dscores, amax, scratch, device());
  if (!m_packed || overlaps(dscores, probs) || overlaps(dscores, dprobs)) {
    Backend::causal_softmax_backward_amax(probs, dprobs, scale, dscores, amax, scratch);
    return;
  }
  const int64_t t = d.time;
  const float s = *scale.data_as<float>();
  AmaxAccumulator acc(amax);
  for_rows(*m_pool, d.count * t, t, [&](int64_t r0, int64_t r1, int) {
    uint32_t m = 0;
    bool bad = false;
    vec::causal_softmax_backward_rows_amax(probs.data(), probs.dtype(), dprobs.data(),
                                           dprobs.dtype(), dscores.data(), dscores.dtype(), t, r0,
                                           r1, s, m, bad);
    acc.sink.merge(m, bad);
  });
  acc.write_back();
}

}  // namespace ampctl::cpu
