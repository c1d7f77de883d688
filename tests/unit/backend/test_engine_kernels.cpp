// The CPU backend's kernel levels (cpu_backend.h: CpuKernels) against each other:
//   * portable: OpenBLAS and the scalar loops (the reference code);
//   * avx512:   the packed f32 GEMM and the vector elementwise passes of the CPU's path (AVX-512,
//               or AVX2 on the avx2 path: AMPCTL_CPU_ISA=avx2 forces it, scripts/test.sh);
//   * best:     plus the VDPBF16PS GEMM for bf16 x bf16.
// What must hold (cpu_vector.h, cpu_gemm.h):
//   * elementwise ops and the optimizers give bitwise the portable results (same IEEE operations
//     in the same order per element), at sizes that hit full vectors, masked tails and the split
//     between threads;
//   * matrix products do not depend on the thread count, bitwise (k is never split);
//   * every level's product stays within the accumulation bound of tests/unit/backend/
//     test_gemm_ops.cpp (gamma_{k+2} W plus the output rounding), which each level meets with its
//     own summation order;
//   * the one documented difference of the bf16 dot-product kernel, subnormal bf16 inputs and
//     float results flushed to zero, costs at most 2^-126 per step of the k loop in absolute
//     terms and nothing in the normal range.
// On the portable path every level is the portable code and these tests compare it with
// itself (they still run, and still pass).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../../../lib/src/backend/cpu/cpu_backend.h"        // CpuKernels: the levels compared here
#include "../../../lib/src/backend/cpu/engine/cpu_exp.h"     // expf_glibc
#include "../../../lib/src/backend/cpu/engine/cpu_gelu.h"    // tanh_f64
#include "../../../lib/src/backend/cpu/engine/cpu_gemm.h"    // cpu_features
#include "../../../lib/src/backend/cpu/engine/cpu_vector.h"  // expf_glibc_n
#include "ampctl/backend/backend.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

std::unique_ptr<Backend> level(cpu::CpuKernels k, int threads = 2) {
  return std::make_unique<cpu::CpuBackend>(threads, k);
}

// Random values over several binades plus the special ones every pass must carry through
// unchanged in kind: signed zeros, infinities, NaNs with payloads, subnormals of each format,
// values at rounding ties of f16 and bf16.
std::vector<float> awkward_values(std::mt19937_64& rng, size_t n) {
  std::vector<float> v = random_values(rng, n, -8, 4);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            bits_float(0x7fc12345u),
                            bits_float(0xff812345u),       // a signalling NaN
                            std::ldexp(1.0f, -20),         // f16 subnormal
                            std::ldexp(1.0f, -130),        // float (and bf16) subnormal
                            1.0f + std::ldexp(1.0f, -11),  // f16 tie
                            1.0f + std::ldexp(1.0f, -8),   // bf16 tie
                            65519.0f,
                            65520.0f};
  for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % std::size(specials)];
  return v;
}

const size_t kSizes[] = {1, 15, 16, 17, 33, 100, 70001};

void expect_same_bits(Backend& a, Backend& b, const Tensor& ta, const Tensor& tb,
                      const std::string& what, bool nan_any = false) {
  SCOPED_TRACE(what);
  BitwiseCheck check(ta.dtype(), nan_any);
  check.add_all(download_bits(a, ta), download_bits(b, tb));
  EXPECT_TRUE(check.ok()) << check.report();
}

TEST(CpuKernels, CastMatchesPortableBitwise) {
  auto fast = level(cpu::CpuKernels::best), ref = level(cpu::CpuKernels::portable);
  std::mt19937_64 rng(0xca57);
  for (size_t n : kSizes) {
    const std::vector<float> v = awkward_values(rng, n);
    for (DType from : kFloatDTypes) {
      for (DType to : kFloatDTypes) {
        Tensor sf = upload_values(*fast, {static_cast<int64_t>(n)}, from, v);
        Tensor sr = upload_values(*ref, {static_cast<int64_t>(n)}, from, v);
        Tensor df = fast->empty({static_cast<int64_t>(n)}, to);
        Tensor dr = ref->empty({static_cast<int64_t>(n)}, to);
        fast->cast(sf, df);
        ref->cast(sr, dr);
        expect_same_bits(*fast, *ref, df, dr,
                         std::string("cast ") + dtype_name(from) + " -> " + dtype_name(to) +
                             ", n " + std::to_string(n));
      }
    }
  }
}

TEST(CpuKernels, ElementwiseOpsMatchPortableBitwise) {
  auto fast = level(cpu::CpuKernels::best), ref = level(cpu::CpuKernels::portable);
  std::mt19937_64 rng(0xe1e3);
  for (size_t n : kSizes) {
    const Shape shape{static_cast<int64_t>(n)};
    const std::vector<float> x = awkward_values(rng, n), y = awkward_values(rng, n);
    for (DType dd : kFloatDTypes) {
      for (DType ds : kFloatDTypes) {
        const std::string ctx =
            std::string(dtype_name(dd)) + ", " + dtype_name(ds) + ", n " + std::to_string(n);
        for (float alpha : {1.0f, 0.37f}) {
          Tensor af = upload_values(*fast, shape, dd, x), ar = upload_values(*ref, shape, dd, x);
          fast->add_(af, upload_values(*fast, shape, ds, y), alpha);
          ref->add_(ar, upload_values(*ref, shape, ds, y), alpha);
          expect_same_bits(*fast, *ref, af, ar, "add_ alpha " + fmt(alpha) + ", " + ctx, true);
        }
        {
          Tensor of = fast->empty(shape, dd), orr = ref->empty(shape, dd);
          fast->mul_scalar_tensor(upload_values(*fast, shape, ds, x), scalar_f32(*fast, -3.5f), of);
          ref->mul_scalar_tensor(upload_values(*ref, shape, ds, x), scalar_f32(*ref, -3.5f), orr);
          expect_same_bits(*fast, *ref, of, orr, "mul_scalar_tensor " + ctx, true);
        }
        {
          Tensor yf = fast->empty(shape, dd), yr = ref->empty(shape, dd);
          fast->activation_forward(nn::ActivationKind::relu, upload_values(*fast, shape, ds, x),
                                   yf);
          ref->activation_forward(nn::ActivationKind::relu, upload_values(*ref, shape, ds, x), yr);
          expect_same_bits(*fast, *ref, yf, yr, "relu forward " + ctx);
          Tensor df = fast->empty(shape, dd), dr = ref->empty(shape, dd);
          fast->activation_backward(nn::ActivationKind::relu, Tensor{},
                                    upload_values(*fast, shape, ds, x),
                                    upload_values(*fast, shape, ds, y), df);
          ref->activation_backward(nn::ActivationKind::relu, Tensor{},
                                   upload_values(*ref, shape, ds, x),
                                   upload_values(*ref, shape, ds, y), dr);
          expect_same_bits(*fast, *ref, df, dr, "relu backward " + ctx);
        }
      }
    }
  }
  // sum_rows: each column summed over the rows in order, whatever the split over columns.
  const std::pair<int64_t, int64_t> shapes[] = {{7, 100}, {300, 257}, {1, 1}, {64, 1040}};
  for (auto [rows, cols] : shapes) {
    for (DType dx : kFloatDTypes) {
      for (DType dout : kFloatDTypes) {
        const std::vector<float> v = awkward_values(rng, static_cast<size_t>(rows * cols));
        Tensor of = fast->empty({cols}, dout), orr = ref->empty({cols}, dout);
        fast->sum_rows(upload_values(*fast, {rows, cols}, dx, v), of);
        ref->sum_rows(upload_values(*ref, {rows, cols}, dx, v), orr);
        expect_same_bits(*fast, *ref, of, orr,
                         "sum_rows " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                             dtype_name(dx) + " -> " + dtype_name(dout),
                         true);
      }
    }
  }
}

TEST(CpuKernels, OptimizerStepsMatchPortableBitwise) {
  std::mt19937_64 rng(0x0b7);
  for (size_t n : kSizes) {
    const Shape shape{static_cast<int64_t>(n)};
    const std::vector<float> p0 = random_values(rng, n, -6, 1);
    std::vector<float> g0 = random_values(rng, n, -12, 2);
    std::vector<float> m0 = random_values(rng, n, -12, -2);
    std::vector<float> v0 = random_values(rng, n, -20, -4);
    for (float& v : v0) v = std::fabs(v);
    std::vector<float> mask0(n);
    for (size_t i = 0; i < n; ++i) {
      mask0[i] = i % 5 == 3    ? -0.0f
                 : i % 11 == 7 ? bits_float(0x7fc00000u)
                 : (i / 3) % 2 ? 1.0f
                               : 0.0f;
    }
    for (DType lowp : {DType::f32, DType::f16, DType::bf16, DType::i32}) {  // i32: no copy
      const bool with_lowp = lowp != DType::i32;
      for (int variant = 0; variant < 6; ++variant) {
        const std::string ctx = "n " + std::to_string(n) + ", lowp " +
                                (with_lowp ? dtype_name(lowp) : "none") + ", variant " +
                                std::to_string(variant);
        // Adam: 0 plain, 1 AdamW + maximize, 2 Adam + weight decay, 3 beta1 = 0.2 (lerp's other
        // branch) with an unscale; 4 AdamW and 5 Adam + weight decay with a decay mask
        // (decay_on: matrices: zeros, ones, a -0 and a NaN, which counts as set).
        auto adam = [&](Backend& be) {
          OptimizerStepArgs a;
          optim::AdamHyper h;
          a.params = upload_values(be, shape, DType::f32, p0);
          a.grads = upload_values(be, shape, DType::f32, g0);
          a.exp_avg = upload_values(be, shape, DType::f32, m0);
          a.exp_avg_sq = upload_values(be, shape, DType::f32, v0);
          a.step = scalar_i32(be, 3);
          a.found_inf = scalar_f32(be, 0.0f);
          a.inv_scale = scalar_f32(be, variant == 3 ? 1.0f / 1024 : 1.0f);
          if (with_lowp) a.lowp_params = be.empty(shape, lowp);
          if (variant >= 4) a.decay_mask = upload_values(be, shape, DType::f32, mask0);
          h.decoupled = variant == 1 || variant == 4;
          h.maximize = variant == 1;
          h.weight_decay = variant == 1 || variant == 2 || variant >= 4 ? 0.01 : 0.0;
          if (variant == 3) h.beta1 = 0.2;
          a.hyper = h;
          be.optimizer_step(a);
          return a;
        };
        auto fast = level(cpu::CpuKernels::best), ref = level(cpu::CpuKernels::portable);
        const OptimizerStepArgs af = adam(*fast), ar = adam(*ref);
        expect_same_bits(*fast, *ref, af.params, ar.params, "adam params, " + ctx);
        expect_same_bits(*fast, *ref, af.exp_avg, ar.exp_avg, "adam exp_avg, " + ctx);
        expect_same_bits(*fast, *ref, af.exp_avg_sq, ar.exp_avg_sq, "adam exp_avg_sq, " + ctx);
        if (with_lowp) {
          expect_same_bits(*fast, *ref, af.lowp_params, ar.lowp_params, "adam lowp, " + ctx);
        }
        if (variant >= 4) continue;
        // SGD: 0 plain, 1 momentum (first step), 2 momentum + nesterov + decay + dampening,
        // 3 momentum, maximize, unscale.
        auto sgd = [&](Backend& be) {
          OptimizerStepArgs a;
          optim::SgdHyper h;
          a.params = upload_values(be, shape, DType::f32, p0);
          a.grads = upload_values(be, shape, DType::f32, g0);
          a.step = scalar_i32(be, variant == 1 ? 0 : 5);
          a.inv_scale = scalar_f32(be, variant == 3 ? 0.125f : 1.0f);
          if (variant > 0) {
            a.momentum_buf = upload_values(be, shape, DType::f32, m0);
            h.momentum = 0.9f;
          }
          h.nesterov = variant == 2;
          h.weight_decay = variant == 2 ? 1e-3f : 0.0f;
          h.dampening = variant == 2 ? 0.1f : 0.0f;
          h.maximize = variant == 3;
          h.lr = 0.05f;
          a.hyper = h;
          if (with_lowp) a.lowp_params = be.empty(shape, lowp);
          be.optimizer_step(a);
          return a;
        };
        const OptimizerStepArgs sf = sgd(*fast), sr = sgd(*ref);
        expect_same_bits(*fast, *ref, sf.params, sr.params, "sgd params, " + ctx);
        if (variant > 0) {
          expect_same_bits(*fast, *ref, sf.momentum_buf, sr.momentum_buf, "sgd buf, " + ctx);
        }
        if (with_lowp) {
          expect_same_bits(*fast, *ref, sf.lowp_params, sr.lowp_params, "sgd lowp, " + ctx);
        }
      }
    }
  }
}

// The tanh GELU's own tanh (cpu_gelu.h: double evaluation, one rounding) is within half an ulp
// of tanh plus the double evaluation's ~1e-13 relative error, over a sweep of every 4099th float
// bit pattern (all binades, both signs); it is odd, keeps NaN and maps +-inf to +-1.
TEST(CpuKernels, GeluTanhsOwnTanhIsWithinHalfAnUlp) {
  double worst = 0.0;
  uint32_t worst_bits = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    const float v = bits_float(static_cast<uint32_t>(b));
    if (!std::isfinite(v)) continue;
    const float t = cpu::tanh_f64(v);
    const double ref = std::tanh(static_cast<double>(v));
    if (ref == 0.0) {
      ASSERT_EQ(float_bits(t), float_bits(v)) << "tanh of a zero is that zero";
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
    const double err = std::fabs(static_cast<double>(t) - ref) / ulp;
    if (err > worst) {
      worst = err;
      worst_bits = static_cast<uint32_t>(b);
    }
    ASSERT_EQ(float_bits(cpu::tanh_f64(-v)), float_bits(t) ^ 0x80000000u) << "odd at " << v;
  }
  EXPECT_LE(worst, 0.5 + 1e-5) << "at " << bits_float(worst_bits);
  EXPECT_TRUE(std::isnan(cpu::tanh_f64(bits_float(0x7fc12345u))));
  EXPECT_EQ(cpu::tanh_f64(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(cpu::tanh_f64(-std::numeric_limits<float>::infinity()), -1.0f);
}

// gelu_tanh forward and backward: the vector level gives the portable level's bits (the same
// float formula around the same double tanh), at sizes with tails, every dtype pair, in place,
// and for 1, 2 and 3 threads (140001 elements: split between threads).
TEST(CpuKernels, GeluTanhMatchesPortableBitwiseAtEveryThreadCount) {
  std::mt19937_64 rng(0x9e1f);
  auto ref = level(cpu::CpuKernels::portable);
  std::unique_ptr<Backend> fast[] = {level(cpu::CpuKernels::best, 1),
                                     level(cpu::CpuKernels::best, 2),
                                     level(cpu::CpuKernels::best, 3)};
  for (size_t n : {size_t{1}, size_t{17}, size_t{100}, size_t{140001}}) {
    const Shape shape{static_cast<int64_t>(n)};
    std::vector<float> x = awkward_values(rng, n);
    for (size_t i = 3; i < n; i += 5) x[i] = std::ldexp(x[i], 3);  // |x| up to 128: tanh saturates
    const std::vector<float> dy = random_values(rng, n, -6, 6);
    for (DType dx : kFloatDTypes) {
      for (DType dd : kFloatDTypes) {
        if (n > 1000 && dd != dx) continue;  // the thread split: one dtype per operand is enough
        Tensor yr = ref->empty(shape, dd), gr = ref->empty(shape, dd);
        ref->activation_forward(nn::ActivationKind::gelu_tanh, upload_values(*ref, shape, dx, x),
                                yr);
        ref->activation_backward(nn::ActivationKind::gelu_tanh, upload_values(*ref, shape, dx, x),
                                 Tensor{}, upload_values(*ref, shape, dd, dy), gr);
        Tensor hr = upload_values(*ref, shape, dx, x);
        if (dx == dd) {
          ref->activation_forward(nn::ActivationKind::gelu_tanh, hr, hr);
          ref->activation_backward(nn::ActivationKind::gelu_tanh, hr, Tensor{}, hr, hr);
        }
        for (auto& be : fast) {
          const std::string ctx = std::string(dtype_name(dx)) + " -> " + dtype_name(dd) + ", n " +
                                  std::to_string(n) + ", " + be->description();
          Tensor yf = be->empty(shape, dd), gf = be->empty(shape, dd);
          be->activation_forward(nn::ActivationKind::gelu_tanh, upload_values(*be, shape, dx, x),
                                 yf);
          expect_same_bits(*be, *ref, yf, yr, "gelu_tanh forward " + ctx, true);
          be->activation_backward(nn::ActivationKind::gelu_tanh, upload_values(*be, shape, dx, x),
                                  Tensor{}, upload_values(*be, shape, dd, dy), gf);
          expect_same_bits(*be, *ref, gf, gr, "gelu_tanh backward " + ctx, true);
          if (dx != dd) continue;
          // In place (x, dy and dx one tensor, as the op tests' aliasing case).
          Tensor hf = upload_values(*be, shape, dx, x);
          be->activation_forward(nn::ActivationKind::gelu_tanh, hf, hf);
          be->activation_backward(nn::ActivationKind::gelu_tanh, hf, Tensor{}, hf, hf);
          expect_same_bits(*be, *ref, hf, hr, "gelu_tanh in place " + ctx, true);
        }
      }
    }
  }
}

// The softmax's exp (cpu_exp.h): the 16-lane expf_glibc gives the scalar one's bits, and the
// scalar one libm's expf (glibc 2.36's __expf_fma, what Debian 12 runs on a CPU with FMA), over
// every 127th float bit pattern (all binades, both signs, the special cases, NaN payloads) and
// the edges of glibc's special-case ranges; the result is within 0.502 ulp of exp in double.
// The scalar exp's checks hold on every path; the vector one runs on the avx512 and avx2 paths
// (elsewhere the softmax calls the scalar one), and libm is __expf_fma only on a CPU with FMA.
TEST(CpuExp, VectorScalarAndLibmAgreeBitwise) {
  const bool vector = cpu::cpu_features().vector;
  const bool libm_fma = cpu_caps().avx2;  // AVX2 + FMA + F16C: glibc takes __expf_fma
  std::cout << "vector exp " << (vector ? "checked" : "not on this path") << ", libm "
            << (libm_fma ? "checked" : "not checked (no FMA)") << "\n";
  constexpr uint64_t kStep = 127;
  std::vector<float> x;
  x.reserve((uint64_t{1} << 32) / kStep + 64);
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += kStep)
    x.push_back(bits_float(static_cast<uint32_t>(b)));
  for (uint32_t edge : {0x42b17217u, 0xc2cff1b4u, 0xc2ce8ecfu, 0x42b00000u, 0xc2b00000u,
                        0xff800000u, 0x7f800000u, 0x7fc00001u, 0xffbfffffu}) {
    for (int d = -3; d <= 3; ++d) x.push_back(bits_float(edge + static_cast<uint32_t>(d)));
  }
  std::vector<float> y(x.size());
  if (vector) {
    cpu::vec::expf_glibc_n(x.data(), y.data(), x.size());
  } else {
    for (size_t i = 0; i < x.size(); ++i) y[i] = cpu::expf_glibc(x[i]);
  }
  size_t mismatches = 0, libm_mismatches = 0;
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = cpu::expf_glibc(x[i]);
    const float l = libm_fma ? expf(x[i]) : s;
    if (std::isnan(s)) {
      mismatches += !std::isnan(y[i]);
      libm_mismatches += !std::isnan(l);
      continue;
    }
    mismatches += float_bits(y[i]) != float_bits(s);
    libm_mismatches += float_bits(l) != float_bits(s);
    if (mismatches == 1 && float_bits(y[i]) != float_bits(s)) {
      ADD_FAILURE() << "vector " << y[i] << " scalar " << s << " at " << x[i];
    }
    if (libm_mismatches == 1 && float_bits(l) != float_bits(s)) {
      ADD_FAILURE() << "libm " << l << " ours " << s << " at " << x[i];
    }
    const double ref = std::exp(static_cast<double>(x[i]));
    if (std::isfinite(ref) && ref >= 0x1p-126 && ref <= 0x1.fffffep127) {
      const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
      worst = std::max(worst, std::fabs(static_cast<double>(s) - ref) / ulp);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << x.size();
  EXPECT_EQ(libm_mismatches, 0u) << "of " << x.size();
  EXPECT_LE(worst, 0.502);
}

// global_norm's block sums (cpu_vector.h: 16 lanes in index order, folded in halves), in
// double, bitwise against that order written out here, for the portable code and (on the avx512
// and avx2 paths) the vector code: full blocks, short ones and masked tails, each dtype, values
// over 2^-20 .. 2^20 (so the double sum's last bits depend on the order: one chain, 8 lanes or
// another fold fails), zeros and subnormals included.
TEST(CpuKernels, NormBlocksFollowTheDocumentedOrderBitwise) {
  std::mt19937_64 rng(0x40b1);
  size_t compared = 0, chain_differs = 0;
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100}, size_t{4095},
                   cpu::vec::kNormBlock}) {
    std::vector<float> v = random_values(rng, n, -20, 20);
    for (size_t i = 0; i < n; i += 13) v[i] = (i / 13) % 2 ? 0.0f : std::ldexp(1.0f, -140);
    for (DType d : kFloatDTypes) {
      std::vector<float> r(v);
      for (float& x : r) x = round_to(x, d);
      double lane[16] = {}, chain = 0.0;
      for (size_t i = 0; i < n; ++i) {
        lane[i % 16] += static_cast<double>(r[i]) * static_cast<double>(r[i]);
        chain += static_cast<double>(r[i]) * static_cast<double>(r[i]);
      }
      for (size_t half = 8; half >= 1; half /= 2) {
        for (size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
      }
      // The dtype's storage, as the backend holds it.
      auto be = level(cpu::CpuKernels::portable, 1);
      Tensor t = upload_values(*be, {static_cast<int64_t>(n)}, d, r);
      const std::string what = std::string(dtype_name(d)) + ", n " + std::to_string(n);
      const double portable = cpu::vec::norm_block_portable(t.data(), d, 0, n);
      EXPECT_EQ(std::bit_cast<uint64_t>(portable), std::bit_cast<uint64_t>(lane[0]))
          << "portable, " << what;
      if (cpu::cpu_features().vector) {
        const double vector = cpu::vec::norm_block(t.data(), d, 0, n);
        EXPECT_EQ(std::bit_cast<uint64_t>(vector), std::bit_cast<uint64_t>(lane[0]))
            << cpu_isa_name(cpu_isa()) << ", " << what;
      }
      ++compared;
      chain_differs += std::bit_cast<uint64_t>(chain) != std::bit_cast<uint64_t>(lane[0]);
    }
  }
  // The inputs are order-sensitive: the one-chain sum differs somewhere.
  EXPECT_GT(chain_differs, 0u) << "of " << compared;
}

// The vector level evaluates GELU of an f16 or bf16 input by table (cpu_vector.cpp: GeluTable):
// every one of the 65536 bit patterns of each, forward into every output dtype and backward
// with a dy per element, gives the portable level's bits (which evaluate the formula), at 1 and
// 2 threads, in place included.
TEST(CpuKernels, GeluTanhTableGivesThePortableBitsForEvery16BitInput) {
  std::mt19937_64 rng(0x9e20);
  auto ref = level(cpu::CpuKernels::portable);
  std::unique_ptr<Backend> fast[] = {level(cpu::CpuKernels::best, 1),
                                     level(cpu::CpuKernels::best, 2)};
  const size_t n = 65536;
  const Shape shape{static_cast<int64_t>(n)};
  const std::vector<float> dy = random_values(rng, n, -6, 6);
  for (DType dx : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = static_cast<uint16_t>(i);
    auto upload_bits = [&](Backend& be) {
      Tensor t = be.empty(shape, dx);
      be.upload(t, bits.data(), n * 2);
      return t;
    };
    for (DType dd : kFloatDTypes) {
      Tensor yr = ref->empty(shape, dd), gr = ref->empty(shape, dd);
      ref->activation_forward(nn::ActivationKind::gelu_tanh, upload_bits(*ref), yr);
      ref->activation_backward(nn::ActivationKind::gelu_tanh, upload_bits(*ref), Tensor{},
                               upload_values(*ref, shape, dd, dy), gr);
      for (auto& be : fast) {
        const std::string ctx =
            std::string(dtype_name(dx)) + " -> " + dtype_name(dd) + ", " + be->description();
        Tensor yf = be->empty(shape, dd), gf = be->empty(shape, dd);
        be->activation_forward(nn::ActivationKind::gelu_tanh, upload_bits(*be), yf);
        expect_same_bits(*be, *ref, yf, yr, "gelu_tanh forward " + ctx, true);
        be->activation_backward(nn::ActivationKind::gelu_tanh, upload_bits(*be), Tensor{},
                                upload_values(*be, shape, dd, dy), gf);
        expect_same_bits(*be, *ref, gf, gr, "gelu_tanh backward " + ctx, true);
        if (dd != dx) continue;
        Tensor hr = upload_bits(*ref), hf = upload_bits(*be);
        ref->activation_forward(nn::ActivationKind::gelu_tanh, hr, hr);
        be->activation_forward(nn::ActivationKind::gelu_tanh, hf, hf);
        expect_same_bits(*be, *ref, hf, hr, "gelu_tanh forward in place " + ctx, true);
      }
    }
  }
}

// LayerNorm forward and backward: the vector level (16 rows per vector, each lane summing its
// row in index order; the parameter sums one lane per column over the rows in order) gives the
// portable level's bits for every output, for 1, 2 and 3 threads, at shapes with partial row
// blocks and column tails, every input dtype, dx in place of dy, and accumulating into
// existing dgamma / dbeta.
TEST(CpuKernels, LayerNormMatchesPortableBitwiseAtEveryThreadCount) {
  std::mt19937_64 rng(0x1a7e);
  auto ref = level(cpu::CpuKernels::portable);
  std::unique_ptr<Backend> fast[] = {level(cpu::CpuKernels::best, 1),
                                     level(cpu::CpuKernels::best, 2),
                                     level(cpu::CpuKernels::best, 3)};
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {5, 33}, {37, 128}, {400, 352}};
  for (auto [rows, cols] : shapes) {
    const size_t n = static_cast<size_t>(rows * cols);
    std::vector<float> xv = random_values(rng, n, -4, 3);
    for (size_t i = 0; i < n; i += 3) xv[i] = xv[i] + 3.0f;  // a mean away from zero
    const std::vector<float> dyv = random_values(rng, n, -8, 2);
    const std::vector<float> gv = random_values(rng, static_cast<size_t>(cols), -1, 1);
    const std::vector<float> bv = random_values(rng, static_cast<size_t>(cols), -3, 0);
    const std::vector<float> acc = random_values(rng, static_cast<size_t>(cols), -2, 0);
    for (DType dx : kFloatDTypes) {
      // The shape split between threads: the residual stream's f32 input is enough there.
      if (n > 10000 && dx != DType::f32) continue;
      for (DType dd : kFloatDTypes) {
        auto run = [&](Backend& be) {
          struct Out {
            Tensor y, mean, rstd, dxt, dg, db, inplace;
          } o;
          const Tensor x = upload_values(be, {rows, cols}, dx, xv);
          const Tensor g = upload_values(be, {cols}, DType::f32, gv);
          const Tensor b = upload_values(be, {cols}, DType::f32, bv);
          o.y = be.empty({rows, cols}, dd);
          o.mean = be.empty({rows}, DType::f32);
          o.rstd = be.empty({rows}, DType::f32);
          be.layer_norm_forward(x, g, b, o.y, o.mean, o.rstd, 1e-5f);
          o.dxt = be.empty({rows, cols}, dd);
          o.dg = upload_values(be, {cols}, DType::f32, acc);
          o.db = upload_values(be, {cols}, DType::f32, acc);
          be.layer_norm_backward(x, g, o.mean, o.rstd, upload_values(be, {rows, cols}, dd, dyv),
                                 o.dxt, o.dg, o.db);
          o.inplace = upload_values(be, {rows, cols}, dd, dyv);
          be.layer_norm_backward(x, g, o.mean, o.rstd, o.inplace, o.inplace, Tensor{}, Tensor{});
          return o;
        };
        const auto r = run(*ref);
        for (auto& be : fast) {
          const auto f = run(*be);
          const std::string ctx = std::to_string(rows) + "x" + std::to_string(cols) + " " +
                                  dtype_name(dx) + " -> " + dtype_name(dd) + ", " +
                                  be->description();
          expect_same_bits(*be, *ref, f.y, r.y, "y " + ctx);
          expect_same_bits(*be, *ref, f.mean, r.mean, "mean " + ctx);
          expect_same_bits(*be, *ref, f.rstd, r.rstd, "rstd " + ctx);
          expect_same_bits(*be, *ref, f.dxt, r.dxt, "dx " + ctx);
          expect_same_bits(*be, *ref, f.dg, r.dg, "dgamma " + ctx);
          expect_same_bits(*be, *ref, f.db, r.db, "dbeta " + ctx);
          expect_same_bits(*be, *ref, f.inplace, r.inplace, "dx in place of dy " + ctx);
        }
      }
    }
  }
}

// softmax_cross_entropy, fused per row on the pool's threads at the vector level: the loss, the
// hit count and every gradient element give the portable level's bits, for 1, 2 and 3 threads,
// every logits / gradient dtype pair, a NaN row and an infinite logit, and the gradient written
// in place of the logits. heads_from_rows / heads_to_rows (copies split over the threads) too.
TEST(CpuKernels, CrossEntropyAndHeadCopiesMatchPortableBitwiseAtEveryThreadCount) {
  std::mt19937_64 rng(0xce11);
  auto ref = level(cpu::CpuKernels::portable);
  std::unique_ptr<Backend> fast[] = {level(cpu::CpuKernels::best, 1),
                                     level(cpu::CpuKernels::best, 2),
                                     level(cpu::CpuKernels::best, 3)};
  for (int64_t rows : {int64_t{1}, int64_t{37}, int64_t{1500}}) {
    const int64_t cols = 113;
    std::vector<float> xv = random_values(rng, static_cast<size_t>(rows * cols), -4, 4);
    if (rows > 1) {
      xv[static_cast<size_t>(cols + 5)] = std::numeric_limits<float>::quiet_NaN();
      xv[static_cast<size_t>(2 * cols + 7)] = std::numeric_limits<float>::infinity();
    }
    std::vector<int32_t> lab(static_cast<size_t>(rows));
    for (int32_t& l : lab) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(cols));
    for (DType dl : kFloatDTypes) {
      for (DType dg : kFloatDTypes) {
        if (rows > 100 && dg != dl) continue;  // the thread split: one dtype pair each is enough
        auto run = [&](Backend& be, bool in_place) {
          const Tensor x = upload_values(be, {rows, cols}, dl, xv);
          const Tensor labels = be.from_host({rows}, DType::i32, lab.data());
          const Tensor loss = be.zeros({1}, DType::f32), hits = be.zeros({1}, DType::i32);
          const Tensor d = in_place ? x : be.empty({rows, cols}, dg);
          be.softmax_cross_entropy(x, labels, loss, hits, d, scalar_f32(be, 1024.0f));
          return std::vector<Tensor>{loss, hits, d};
        };
        for (bool in_place : {false, true}) {
          if (in_place && dg != dl) continue;
          const auto r = run(*ref, in_place);
          for (auto& be : fast) {
            const auto f = run(*be, in_place);
            const std::string ctx = std::to_string(rows) + " rows, " + dtype_name(dl) + " -> " +
                                    dtype_name(dg) + (in_place ? " in place, " : ", ") +
                                    be->description();
            expect_same_bits(*be, *ref, f[0], r[0], "loss " + ctx, true);
            EXPECT_EQ(download_bits(*be, f[1]), download_bits(*ref, r[1])) << "hits " << ctx;
            expect_same_bits(*be, *ref, f[2], r[2], "dlogits " + ctx, true);
          }
        }
      }
    }
  }
  // Head layouts: [B*T, W] rows <-> [B, H, T, hs], there and back, columns at an offset.
  const int64_t B = 5, H = 3, T = 17, hs = 8, W = 3 * H * hs;
  const std::vector<float> rv = random_values(rng, static_cast<size_t>(B * T * W), -3, 3);
  for (DType d : kFloatDTypes) {
    auto run = [&](Backend& be) {
      const Tensor rows = upload_values(be, {B * T, W}, d, rv);
      const Tensor heads = be.empty({B, H, T, hs}, d);
      be.heads_from_rows(rows, H * hs, heads);
      const Tensor back = be.zeros({B * T, W}, d);
      be.heads_to_rows(heads, back, 2 * H * hs);
      return std::pair{heads, back};
    };
    const auto r = run(*ref);
    for (auto& be : fast) {
      const auto f = run(*be);
      expect_same_bits(*be, *ref, f.first, r.first,
                       std::string("heads_from_rows ") + dtype_name(d));
      expect_same_bits(*be, *ref, f.second, r.second,
                       std::string("heads_to_rows ") + dtype_name(d));
    }
  }
}

struct GemmCase {
  int64_t m, n, k;
};

// Shapes that span several k blocks (k > 512), leave partial tiles at both edges, and are split
// between threads by columns (wide) or by rows (narrow).
// Row splits with op(B) packed once and shared (cpu_gemm.cpp: 37 x 70 at 2 threads, 130 x 20 and
// 100 x 40 at 2 and 3, several k blocks, an odd last one) against the whole product on one
// thread and the column split of 5 x 300.
const GemmCase kGemmCases[] = {
    {37, 70, 600}, {130, 20, 1030}, {5, 300, 33}, {100, 40, 301}, {12, 32, 1}};

std::vector<float> rounded_values(std::mt19937_64& rng, size_t n, DType d) {
  std::vector<float> v = random_values(rng, n, -3, 1);
  for (float& x : v) x = round_to(x, d);
  return v;
}

TEST(CpuKernels, GemmBitsDoNotDependOnTheThreadCount) {
  std::unique_ptr<Backend> be[] = {level(cpu::CpuKernels::best, 1), level(cpu::CpuKernels::best, 2),
                                   level(cpu::CpuKernels::best, 3)};
  std::mt19937_64 rng(0x7d);
  for (const GemmCase& s : kGemmCases) {
    for (DType da : kFloatDTypes) {
      for (DType db : kFloatDTypes) {
        for (DType dc : kFloatDTypes) {
          for (bool ta : {false, true}) {
            for (bool tb : {false, true}) {
              const std::vector<float> av = rounded_values(rng, static_cast<size_t>(s.m * s.k), da);
              const std::vector<float> bv = rounded_values(rng, static_cast<size_t>(s.k * s.n), db);
              const std::vector<float> cv = rounded_values(rng, static_cast<size_t>(s.m * s.n), dc);
              const Shape as = ta ? Shape{s.k, s.m} : Shape{s.m, s.k};
              const Shape bs = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
              std::vector<uint32_t> first;
              for (auto& b : be) {
                Tensor c = upload_values(*b, {s.m, s.n}, dc, cv);
                b->gemm(upload_values(*b, as, da, av), ta, upload_values(*b, bs, db, bv), tb, c,
                        0.75f, -0.5f);
                const std::vector<uint32_t> bits = download_bits(*b, c);
                if (first.empty()) {
                  first = bits;
                  continue;
                }
                SCOPED_TRACE(std::string("A ") + dtype_name(da) + (ta ? "^T" : "") + " B " +
                             dtype_name(db) + (tb ? "^T" : "") + " -> " + dtype_name(dc) + ", " +
                             std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                             std::to_string(s.k) + ", " + b->description());
                BitwiseCheck check(dc);
                check.add_all(bits, first);
                EXPECT_TRUE(check.ok()) << check.report();
              }
            }
          }
        }
      }
    }
  }
}

// The packed f32 kernel's arithmetic (cpu_gemm.h), the same on the avx512 path (12 x 32 tiles in
// ZMM registers) and the avx2 path (6 x 16 tiles in YMM registers, AMPCTL_CPU_ISA=avx2): each
// element is one chain of fused multiply-adds over k in order from +0, then alpha * acc,
// + beta * C, + bias, rounded once to C's dtype. Written out here with std::fma, it must give
// the kernels' bits for every dtype, transpose and tile edge, at 1 and 3 threads (the k blocks,
// the shared op(B) and both splits of kGemmCases); an OpenBLAS product, or a kernel that
// reassociated k (split it, summed two chains), would differ in the last bits somewhere.
TEST(CpuKernels, PackedGemmIsTheDocumentedFmaChainBitwise) {
  if (!cpu::cpu_features().vector) {
    GTEST_SKIP() << "the portable path has no packed kernels (products on OpenBLAS)";
  }
  std::cout << "path: " << cpu_isa_name(cpu_isa()) << "\n";
  std::mt19937_64 rng(0xf3a);
  size_t compared = 0;
  for (const GemmCase& s : kGemmCases) {
    for (DType da : kFloatDTypes) {
      for (DType dc : kFloatDTypes) {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            const DType db = da == DType::f32 ? DType::f16 : da;  // mixed and equal dtypes
            const std::vector<float> av = rounded_values(rng, static_cast<size_t>(s.m * s.k), da);
            const std::vector<float> bv = rounded_values(rng, static_cast<size_t>(s.k * s.n), db);
            const std::vector<float> cv = rounded_values(rng, static_cast<size_t>(s.m * s.n), dc);
            const float alpha = 0.75f, beta = -0.5f;
            std::vector<float> want(static_cast<size_t>(s.m * s.n));
            for (int64_t i = 0; i < s.m; ++i) {
              for (int64_t j = 0; j < s.n; ++j) {
                float acc = 0.0f;
                for (int64_t l = 0; l < s.k; ++l) {
                  const float x = av[static_cast<size_t>(ta ? l * s.m + i : i * s.k + l)];
                  const float y = bv[static_cast<size_t>(tb ? j * s.k + l : l * s.n + j)];
                  acc = std::fma(x, y, acc);
                }
                const float v = alpha * acc + beta * cv[static_cast<size_t>(i * s.n + j)];
                want[static_cast<size_t>(i * s.n + j)] = round_to(v, dc);
              }
            }
            for (int threads : {1, 3}) {
              auto be = level(cpu::CpuKernels::avx512, threads);
              const Shape as = ta ? Shape{s.k, s.m} : Shape{s.m, s.k};
              const Shape bs = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
              Tensor c = upload_values(*be, {s.m, s.n}, dc, cv);
              be->gemm(upload_values(*be, as, da, av), ta, upload_values(*be, bs, db, bv), tb, c,
                       alpha, beta);
              SCOPED_TRACE(std::string("A ") + dtype_name(da) + (ta ? "^T" : "") + " B " +
                           dtype_name(db) + (tb ? "^T" : "") + " -> " + dtype_name(dc) + ", " +
                           std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                           std::to_string(s.k) + ", " + be->description());
              const Tensor ref = upload_values(*be, {s.m, s.n}, dc, want);
              BitwiseCheck check(dc);
              check.add_all(download_bits(*be, c), download_bits(*be, ref));
              EXPECT_TRUE(check.ok()) << check.report();
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0u);
}

// test_gemm_ops.cpp's bound for one element (see there): gamma_{k+2} W + output rounding + the
// reference's own error.
double gemm_bound(double ref, double w, int64_t k, DType dc) {
  auto gamma = [](double n, double u) { return n * u / (1.0 - n * u); };
  const double g = gamma(static_cast<double>(k + 2), std::ldexp(1.0, -24));
  const double ref_err = gamma(static_cast<double>(k + 3), std::ldexp(1.0, -53)) * w;
  const double u_out = dc == DType::f16    ? std::ldexp(1.0, -11)
                       : dc == DType::bf16 ? std::ldexp(1.0, -8)
                                           : std::ldexp(1.0, -24);
  const double eta_out = dc == DType::f16    ? std::ldexp(1.0, -25)
                         : dc == DType::bf16 ? std::ldexp(1.0, -134)
                                             : std::ldexp(1.0, -150);
  return g * w + u_out * (std::fabs(ref) + g * w + ref_err) + eta_out + 2 * ref_err;
}

TEST(CpuKernels, EveryLevelsLinearForwardIsWithinTheAccumulationBound) {
  std::mt19937_64 rng(0x11ea);
  const cpu::CpuKernels levels[] = {cpu::CpuKernels::portable, cpu::CpuKernels::avx512,
                                    cpu::CpuKernels::best};
  for (const GemmCase& s : kGemmCases) {
    for (DType d : kFloatDTypes) {
      // x [m, k], w [n, k], bias [n] in d; the bias joins the float sum (one more rounding:
      // gamma_{k+2} already counts it).
      const std::vector<float> xv = rounded_values(rng, static_cast<size_t>(s.m * s.k), d);
      const std::vector<float> wv = rounded_values(rng, static_cast<size_t>(s.n * s.k), d);
      const std::vector<float> bv = rounded_values(rng, static_cast<size_t>(s.n), d);
      for (cpu::CpuKernels lv : levels) {
        auto be = level(lv);
        SCOPED_TRACE(std::string(dtype_name(d)) + ", " + std::to_string(s.m) + "x" +
                     std::to_string(s.n) + "x" + std::to_string(s.k) + ", " + be->description());
        Tensor y = be->empty({s.m, s.n}, d);
        be->linear_forward(upload_values(*be, {s.m, s.k}, d, xv),
                           upload_values(*be, {s.n, s.k}, d, wv), upload_values(*be, {s.n}, d, bv),
                           y);
        const std::vector<float> got = download_values(*be, y);
        ErrorBudget budget;
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = bv[static_cast<size_t>(j)], w = std::fabs(bv[static_cast<size_t>(j)]);
            for (int64_t l = 0; l < s.k; ++l) {
              const double p = static_cast<double>(xv[static_cast<size_t>(i * s.k + l)]) *
                               wv[static_cast<size_t>(j * s.k + l)];
              sum += p;
              w += std::fabs(p);
            }
            budget.add(static_cast<size_t>(i * s.n + j), got[static_cast<size_t>(i * s.n + j)], sum,
                       gemm_bound(sum, w, s.k, d));
          }
        }
        EXPECT_TRUE(budget.ok()) << budget.report();
      }
    }
  }
}

// VDPBF16PS reads bf16 subnormals as zero and flushes subnormal float results (cpu_gemm.h): a
// product whose every term lies below 2^-126 may come out as zero, an absolute error of at most
// 2^-126 per step of the k loop, while the exact levels keep the float subnormal. In the normal
// range the levels agree exactly here (exact products, sums of two terms with no rounding).
TEST(CpuKernels, Bf16DotProductFlushesOnlyBelowTheNormalRange) {
  const float tiny = std::ldexp(1.0f, -130);  // a bf16 and float subnormal
  const float small = std::ldexp(1.0f, -60);  // product 2^-120: normal
  struct Case {
    std::vector<float> a, b;
    double exact;
  };
  const Case cases[] = {
      {{tiny, 1.0f}, {1.0f, tiny}, std::ldexp(1.0, -129)},
      {{small, small}, {small, -0.5f * small}, std::ldexp(1.0, -121)},
  };
  for (cpu::CpuKernels lv : {cpu::CpuKernels::portable, cpu::CpuKernels::best}) {
    auto be = level(lv);
    for (const Case& c : cases) {
      SCOPED_TRACE(be->description() + ", exact " + fmt(c.exact));
      Tensor out = be->zeros({1, 1}, DType::f32);
      be->gemm(upload_values(*be, {1, 2}, DType::bf16, c.a), false,
               upload_values(*be, {2, 1}, DType::bf16, c.b), false, out);
      const double got = download_values(*be, out)[0];
      if (c.exact >= std::ldexp(1.0, -126)) {
        EXPECT_EQ(got, c.exact);
      } else {
        EXPECT_LE(std::fabs(got - c.exact), 2 * std::ldexp(1.0, -126));  // k = 2 steps
      }
    }
  }
}

}  // namespace
}  // namespace ampctl::test
