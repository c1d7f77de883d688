// The CUDA backend against the CPU reference: the neural-network ops (backend.h,
// "neural-network ops" and the MLP's Linear + GELU pair). Bitwise where both sides run the same
// float operations on the same inputs: relu (forward and backward), tanh backward (it reads only
// the forward output), dropout (the same Philox draw, the same multiply), clip_coef, mse's
// gradient, the correct count of the cross-entropy, and linear_forward on integer-valued inputs
// (every partial sum is exact, so the accumulation order cannot matter and the bias must join
// the float accumulator before the one rounding, as on the CPU); within a derived bound
// otherwise. Then properties of the GPU alone: determinism, the fused LayerNorm and GELU paths
// against their compositions, the refusal of wrong arguments. The harness and the comparison
// rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "activation_bounds.h"
#include "ampctl/backend/backend.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/nn_math.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

// ---- linear_forward and sum_rows ----

struct LinearVariant {
  DType x, w, y;
  bool has_bias;
  DType b;
  int64_t rows, in, out;
  size_t x_offset;  // elements: a view this far into a larger buffer (misaligned for cuBLASLt)
  bool integers;    // small integers: exact products and sums, compared bitwise
};

std::string linear_name(const LinearVariant& v) {
  std::string s = "linear_" + tag(v.x) + "x" + tag(v.w) + "_b" + (v.has_bias ? tag(v.b) : "none") +
                  "_to_" + tag(v.y) + "_" + std::to_string(v.rows) + "x" + std::to_string(v.in) +
                  "x" + std::to_string(v.out);
  if (v.x_offset) s += "_offset" + std::to_string(v.x_offset);
  if (v.integers) s += "_exact";
  return s;
}

void add_linear_cases(std::vector<CudaCase>& cases) {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<LinearVariant> variants = {
      // x, w, y, bias?, b, R, I, O, offset, integers
      {f32, f32, f32, true, f32, 37, 45, 29, 0, false},
      {f16, f16, f16, true, f32, 37, 300, 45, 0, false},   // the autocast case: f32 master bias
      {f16, f16, f16, true, f16, 64, 256, 128, 0, false},  // bias of y's dtype: direct epilogue
      {f16, f16, f16, false, f32, 33, 100, 7, 0, false},
      {f16, f16, f32, true, f32, 20, 64, 48, 0, false},
      {f16, f16, f32, true, f16, 19, 40, 41, 0, false},  // 16-bit bias widened for an f32 output
      {bf16, bf16, bf16, true, f32, 37, 300, 45, 0, false},
      {bf16, bf16, bf16, true, bf16, 16, 128, 64, 0, false},
      {bf16, bf16, f16, true, f32, 8, 32, 16, 0, false},  // output cuBLASLt cannot write: f32 D
      {f16, f32, f16, true, f32, 9, 50, 11, 0, false},    // mixed inputs, widened
      {bf16, f16, f32, false, f32, 9, 50, 11, 0, false},
      {f16, f16, f16, true, f32, 13, 37, 21, 1, false},  // 2-byte aligned x
      {f32, f32, f32, true, f32, 13, 37, 21, 3, false},  // 4-byte aligned x
      {f16, f16, f16, true, bf16, 1, 1, 1, 0, false},
      {f16, f16, f16, true, f32, 5, 0, 3, 0, false},  // empty product: y = round(b)
      {f16, f16, f16, true, f32, 48, 64, 40, 0, true},
      {f16, f16, f16, true, f16, 48, 64, 40, 0, true},
      {bf16, bf16, bf16, true, f32, 48, 64, 40, 0, true},
      {f32, f32, f16, true, f32, 48, 64, 40, 0, true},
  };
  for (const LinearVariant& v : variants) {
    CudaCase c;
    c.name = linear_name(v);
    c.make_inputs = [v](std::mt19937_64& rng) {
      const size_t nx = static_cast<size_t>(v.rows * v.in) + v.x_offset;
      const size_t nw = static_cast<size_t>(v.out * v.in);
      std::vector<HostInput> in;
      if (v.integers) {
        // |x|, |w| <= 8 and I = 64: every partial sum is an integer below 2^12, exact in float; a
        // bias with fractional parts makes y's rounding depend on adding it before rounding.
        in.push_back(from_values({static_cast<int64_t>(nx)}, v.x, small_integers(rng, nx, -8, 8)));
        in.push_back(from_values({v.out, v.in}, v.w, small_integers(rng, nw, -8, 8)));
        std::vector<float> b = uniform_values(rng, static_cast<size_t>(v.out), -3.0f, 3.0f);
        for (float& x : b) x = std::ldexp(std::round(std::ldexp(x, 6)), -6);  // exact in f16/bf16
        in.push_back(from_values({v.out}, v.b, b));
      } else {
        in.push_back(from_values({static_cast<int64_t>(nx)}, v.x, random_values(rng, nx, -3, 2)));
        in.push_back(from_values({v.out, v.in}, v.w, random_values(rng, nw, -4, 1)));
        in.push_back(
            from_values({v.out}, v.b, random_values(rng, static_cast<size_t>(v.out), -3, 3)));
      }
      return in;
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor x = in[0].view(v.x_offset, {v.rows, v.in});
      Tensor y = be.empty({v.rows, v.out}, v.y);
      be.linear_forward(x, in[1], v.has_bias ? in[2] : Tensor{}, y);
      return std::vector<Tensor>{y};
    };
    if (!v.integers) {
      c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
        // Each backend's float y is within gamma_{I+2}(2^-23) * S of x.w (S = sum |x_i w_i|; the
        // products' accumulation in any order, tensor cores possibly truncating) and then the
        // bias add rounds once (2^-24 |y|); two such values differ by twice that.
        const std::vector<double> x = in[0].values(), w = in[1].values(), b = in[2].values();
        const double g = gamma_n(static_cast<double>(v.in + 2), 0x1p-23);
        std::vector<double> delta(static_cast<size_t>(v.rows * v.out));
        for (int64_t r = 0; r < v.rows; ++r) {
          for (int64_t o = 0; o < v.out; ++o) {
            double ref = v.has_bias ? b[static_cast<size_t>(o)] : 0.0, s = 0.0;
            for (int64_t i = 0; i < v.in; ++i) {
              const double p = x[v.x_offset + static_cast<size_t>(r * v.in + i)] *
                               w[static_cast<size_t>(o * v.in + i)];
              ref += p;
              s += std::fabs(p);
            }
            delta[static_cast<size_t>(r * v.out + o)] =
                2.0 * (g * s + kU * (std::fabs(ref) + g * s));
          }
        }
        return std::vector<Spec>{within(delta)};
      };
    }
    cases.push_back(c);
  }
}

void add_sum_rows_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType x, out;
    int64_t rows, cols;
  };
  // 1100 and 5000 rows span several 512-row chunks (the two-kernel path).
  const Variant variants[] = {
      {DType::f32, DType::f32, 37, 45},   {DType::f16, DType::f32, 1100, 37},
      {DType::f16, DType::f16, 64, 300},  {DType::bf16, DType::bf16, 5000, 3},
      {DType::bf16, DType::f32, 1, 1000}, {DType::f32, DType::f16, 0, 5}};
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = "sum_rows_" + tag(v.x) + "_to_" + tag(v.out) + "_" + std::to_string(v.rows) + "x" +
             std::to_string(v.cols);
    c.make_inputs = [v](std::mt19937_64& rng) {
      return std::vector<HostInput>{from_values(
          {v.rows, v.cols}, v.x, random_values(rng, numel_of({v.rows, v.cols}), -6, 4))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.empty({v.cols}, v.out);
      be.sum_rows(in[0], out);
      return std::vector<Tensor>{out};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      // Two orders of the same R - 1 float additions: 2 gamma_R(u) sum_r |x[r, c]|.
      const std::vector<double> x = in[0].values();
      std::vector<double> delta(static_cast<size_t>(v.cols));
      for (int64_t col = 0; col < v.cols; ++col) {
        double s = 0.0;
        for (int64_t r = 0; r < v.rows; ++r)
          s += std::fabs(x[static_cast<size_t>(r * v.cols + col)]);
        delta[static_cast<size_t>(col)] = 2.0 * gamma_n(static_cast<double>(v.rows), kU) * s;
      }
      return std::vector<Spec>{within(delta)};
    };
    cases.push_back(c);
  }
}

// ---- activations and dropout ----

void add_activation_cases(std::vector<CudaCase>& cases) {
  const std::vector<std::pair<DType, DType>> type_pairs = {{DType::f32, DType::f32},
                                                           {DType::f16, DType::f16},
                                                           {DType::bf16, DType::bf16},
                                                           {DType::f32, DType::f16},
                                                           {DType::bf16, DType::f32}};
  constexpr int64_t n = 10007;
  for (nn::ActivationKind kind : {nn::ActivationKind::relu, nn::ActivationKind::gelu,
                                  nn::ActivationKind::tanh, nn::ActivationKind::gelu_tanh}) {
    const bool transcendental = kind != nn::ActivationKind::relu;
    for (const auto& [in_type, out_type] : type_pairs) {
      CudaCase f;
      f.name = std::string(kind_name(kind)) + "_forward_" + tag(in_type) + "_to_" + tag(out_type);
      f.make_inputs = [in_type](std::mt19937_64& rng) {
        return std::vector<HostInput>{
            from_values({n}, in_type, random_with_specials(rng, n, -12, 4, 0.002))};
      };
      f.run = [kind, out_type](Backend& be, std::vector<Tensor>& in) {
        Tensor y = be.empty(in[0].shape(), out_type);
        be.activation_forward(kind, in[0], y);
        return std::vector<Tensor>{y};
      };
      if (transcendental) {
        f.specs = [kind](const std::vector<HostInput>& in,
                         const std::vector<std::vector<double>>&) {
          const std::vector<double> x = in[0].values();
          std::vector<double> delta(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            delta[i] = kind == nn::ActivationKind::gelu ? gelu_delta(x[i])
                       : kind == nn::ActivationKind::gelu_tanh
                           ? gelu_tanh_delta(x[i])
                           : kTranscendentalUlps * ulp_near(std::tanh(x[i]));
          }
          return std::vector<Spec>{within(delta)};
        };
      }
      cases.push_back(f);

      CudaCase b;
      b.name = std::string(kind_name(kind)) + "_backward_" + tag(in_type) + "_to_" + tag(out_type);
      b.make_inputs = [kind, in_type](std::mt19937_64& rng) {
        std::vector<float> x = random_with_specials(rng, n, -12, 4, 0.002);
        std::vector<float> y(n);
        for (int64_t i = 0; i < n; ++i) y[i] = nn::activation_forward(kind, x[i]);
        return std::vector<HostInput>{
            from_values({n}, in_type, x), from_values({n}, in_type, y),
            from_values({n}, in_type, random_with_specials(rng, n, -16, 8, 0.002))};
      };
      b.run = [kind, out_type](Backend& be, std::vector<Tensor>& in) {
        Tensor dx = be.empty(in[0].shape(), out_type);
        be.activation_backward(kind, in[0], in[1], in[2], dx);
        return std::vector<Tensor>{dx};
      };
      if (nn::activation_reads_input(kind)) {  // tanh's and relu's read only y: bitwise
        b.specs = [kind](const std::vector<HostInput>& in,
                         const std::vector<std::vector<double>>&) {
          const std::vector<double> x = in[0].values(), dy = in[2].values();
          std::vector<double> delta(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            delta[i] = kind == nn::ActivationKind::gelu ? gelu_grad_delta(x[i], dy[i])
                                                        : gelu_tanh_grad_delta(x[i], dy[i]);
          }
          return std::vector<Spec>{within(delta)};
        };
      }
      cases.push_back(b);
    }
    // In place: dx overwrites dy (and y overwrites x in the forward pass).
    CudaCase inplace;
    inplace.name = std::string(kind_name(kind)) + "_in_place_f16";
    inplace.make_inputs = [](std::mt19937_64& rng) {
      return std::vector<HostInput>{from_values({n}, DType::f16, random_values(rng, n, -8, 3)),
                                    from_values({n}, DType::f16, random_values(rng, n, -8, 3))};
    };
    inplace.run = [kind](Backend& be, std::vector<Tensor>& in) {
      Tensor x_saved = be.empty(in[0].shape(), DType::f16);
      be.copy(x_saved, in[0]);
      be.activation_forward(kind, in[0], in[0]);
      be.activation_backward(kind, x_saved, in[0], in[1], in[1]);
      return std::vector<Tensor>{in[0], in[1]};
    };
    if (transcendental) {
      inplace.specs = [kind](const std::vector<HostInput>& in,
                             const std::vector<std::vector<double>>& want) {
        // The backward reads the forward's own (possibly differing) output for tanh, so its bound
        // takes the forward's: dy (1 - y^2) moves by |2 y dy| per unit of y.
        const std::vector<double> x = in[0].values(), dy = in[1].values();
        std::vector<double> dfwd(x.size()), dbwd(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          if (kind == nn::ActivationKind::gelu) {
            dfwd[i] = gelu_delta(x[i]);
            dbwd[i] = gelu_grad_delta(x[i], dy[i]);
          } else if (kind == nn::ActivationKind::gelu_tanh) {
            // The backward reads the saved input, not the forward's output.
            dfwd[i] = gelu_tanh_delta(x[i]);
            dbwd[i] = gelu_tanh_grad_delta(x[i], dy[i]);
          } else {
            const double y = std::tanh(x[i]);
            dfwd[i] = kTranscendentalUlps * ulp_near(y);
            const double dy_round = round_bound(want[0][i], dfwd[i], DType::f16);
            dbwd[i] = std::fabs(dy[i]) * (2.0 * std::fabs(y) * dy_round + ulp_near(y * y) +
                                          ulp_near(1.0 - y * y)) +
                      ulp_near(dy[i] * (1.0 - y * y));
          }
        }
        return std::vector<Spec>{within(dfwd), within(dbwd)};
      };
    }
    cases.push_back(inplace);
  }
}

// ---- linear_gelu_forward / linear_gelu_backward_input (the MLP's c_fc + GELU) ----
//
// The GPU fuses the pair into cuBLASLt's GELU epilogues for f16/bf16 with a GELU width divisible by
// 8 (cuda/nn.cpp); the CPU runs the composition. The differences and their bounds, per element:
//   forward pre: linear_forward's bound (two float accumulations of the same products, one
//     rounding to lowp each; AUX holds the float pre-activation rounded once).
//   forward y: the CPU applies its GELU to p_c = round(f_c), the epilogue to the float f_g, so
//     the GELU inputs differ by dx = delta_lin + ulp(p_c) (half an ulp for the CPU's rounding, and
//     as much again for a GPU that rounds too: the composed fallback); GELU's slope is at most
//     kGeluSlope (the maximum of gelu_tanh', 1.1289 at x = 1.5), so dx moves it by kGeluSlope dx
//     (and the epilogue's own error, evaluated at p_c below, by 0.5 kEpilogueTanh dx more).
//     Each side's own GELU then errs by e 0.5 |x| (an absolute error e of its tanh: the CPU's
//     kTranscendentalUlps ulps, the epilogue's kEpilogueTanh; how cuBLASLt evaluates tanh is not
//     documented, and 2^-10 is what a hardware tanh.approx.f32 keeps to, 2^-10.99 relative) plus
//     the rounding of inner (3 float operations: 3 u |inner| moves t by no more) and of the
//     two products and the add around it (one float ulp each of |x|-sized values), which also
//     covers a different but equivalent float formula (x sigmoid(2 inner)).
//   backward dpre: the CPU multiplies gelu'(pre) by r_c = round(acc_c), the epilogue by the float
//     acc_g: |acc_g - r_c| <= 2 gamma S + ulp(acc) (S = sum |dy w|); gelu' moves by e (1/2 +
//     |0.5 x inner'| (2 + e)) for a tanh error e (d(1 - t^2) = (t1 + t2) dt), plus float ulps.
constexpr double kGeluSlope = 1.13;
constexpr double kEpilogueTanh = 0x1p-10;

// One side's float GELU error at x for a tanh error of `e` (absolute).
double gelu_side_error(double x, double e) {
  const double inner = kGeluTanhBeta * (x + kGeluTanhKappa * x * x * x);
  const double t = std::tanh(inner);
  const double g = 0.5 * x * (1.0 + t);
  return 0.5 * std::fabs(x) * (e + 3.0 * kU * std::fabs(inner) + 4.0 * kU) + 2.0 * ulp_near(g);
}

// One side's float gelu' error at x for a tanh error of `e`.
double gelu_grad_side_error(double x, double e) {
  const double inner = kGeluTanhBeta * (x + kGeluTanhKappa * x * x * x);
  const double t = std::tanh(inner);
  const double dt = e + 3.0 * kU * std::fabs(inner);
  const double inner_d = kGeluTanhBeta * (1.0 + 3.0 * kGeluTanhKappa * x * x);
  const double right = std::fabs(0.5 * x * inner_d);
  return 0.5 * dt + right * dt * (2.0 + dt) +
         8.0 * kU * (0.5 * (1.0 + std::fabs(t)) + right * (1.0 - t * t) + 1.0);
}

double gelu_tanh_grad_exact(double x) {
  const double t = gelu_tanh_t(x);
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kGeluTanhBeta * (1.0 + 3.0 * kGeluTanhKappa * x * x);
}

struct LinearGeluVariant {
  DType dtype;  // x, w, pre, y; dy, w2, dpre
  bool has_bias;
  DType b;
  int64_t rows, in, out;  // forward x [rows, in], w [out, in]; backward dy [rows, in], w2 [in, out]
};

// The GPU fuses where the GELU width (out) is a multiple of 8, the dtype f16/bf16 and the bias
// absent or of that dtype, when cuBLASLt offers an algorithm for the leading dimensions; forward
// also needs `in` divisible by 8 (on an H200, cuBLASLt's algorithm for 37 x 45 x 64 in f16 rounded
// the product to f16 before adding the bias, 2^-12 off at |pre| 0.077: cuda/nn.cpp). The bound is
// the same either way.
void add_linear_gelu_cases(std::vector<CudaCase>& cases) {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<LinearGeluVariant> variants = {
      {f16, true, f16, 37, 48, 64},    // odd rows, lowp bias (the GPT's)
      {f16, false, f16, 33, 104, 72},  // GELU_AUX without a bias
      {bf16, true, bf16, 37, 48, 64},
      {bf16, false, bf16, 19, 64, 40},
      {f16, true, f16, 128, 96, 384},  // a GPT-like block: 4 x 96
      {f16, true, f16, 37, 45, 64},    // in not divisible by 8: forward composed on the GPU
      {bf16, false, bf16, 21, 45, 56},
      {f16, true, f16, 29, 50, 30},   // width not divisible by 8: composed on the GPU too
      {bf16, true, f32, 21, 37, 48},  // f32 bias: not D's type, composed
      {f32, true, f32, 13, 20, 16},   // f32: composed
  };
  for (const LinearGeluVariant& v : variants) {
    const std::string base =
        "linear_gelu_" + tag(v.dtype) + "_b" + (v.has_bias ? tag(v.b) : std::string("none")) + "_" +
        std::to_string(v.rows) + "x" + std::to_string(v.in) + "x" + std::to_string(v.out);
    CudaCase f;
    f.name = base + "_forward";
    f.make_inputs = [v](std::mt19937_64& rng) {
      const float ws = 2.0f / std::sqrt(static_cast<float>(v.in));
      return std::vector<HostInput>{
          from_values({v.rows, v.in}, v.dtype,
                      uniform_values(rng, numel_of({v.rows, v.in}), -1.5f, 1.5f)),
          from_values({v.out, v.in}, v.dtype,
                      uniform_values(rng, numel_of({v.out, v.in}), -ws, ws)),
          from_values({v.out}, v.b, uniform_values(rng, static_cast<size_t>(v.out), -0.5f, 0.5f))};
    };
    f.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor pre = be.empty({v.rows, v.out}, v.dtype), y = be.empty({v.rows, v.out}, v.dtype);
      be.linear_gelu_forward(in[0], in[1], v.has_bias ? in[2] : Tensor{}, pre, y);
      return std::vector<Tensor>{pre, y};
    };
    f.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>& want) {
      const std::vector<double> x = in[0].values(), w = in[1].values(), b = in[2].values();
      const double g = gamma_n(static_cast<double>(v.in + 2), 0x1p-23);
      const size_t n = static_cast<size_t>(v.rows * v.out);
      std::vector<double> d_pre(n), d_y(n);
      for (int64_t r = 0; r < v.rows; ++r) {
        for (int64_t o = 0; o < v.out; ++o) {
          double ref = v.has_bias ? b[static_cast<size_t>(o)] : 0.0, s = 0.0;
          for (int64_t i = 0; i < v.in; ++i) {
            const double p =
                x[static_cast<size_t>(r * v.in + i)] * w[static_cast<size_t>(o * v.in + i)];
            ref += p;
            s += std::fabs(p);
          }
          const size_t k = static_cast<size_t>(r * v.out + o);
          d_pre[k] = 2.0 * (g * s + kU * (std::fabs(ref) + g * s));
          const double p_c = want[0][k];  // the CPU's rounded pre-activation
          const double dx = d_pre[k] + ulp(std::fabs(p_c) + d_pre[k], v.dtype);
          d_y[k] = (kGeluSlope + 0.5 * kEpilogueTanh) * dx + gelu_side_error(p_c, kEpilogueTanh) +
                   gelu_side_error(p_c, kTranscendentalUlps * ulp_near(gelu_tanh_t(p_c)));
        }
      }
      return std::vector<Spec>{within(d_pre), within(d_y)};
    };
    cases.push_back(f);

    CudaCase bw;
    bw.name = base + "_backward";
    // dy [rows, in] and w2 [in, out]: the next Linear (out -> in) whose input gradient feeds it.
    bw.make_inputs = [v](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({v.rows, v.in}, v.dtype, random_values(rng, numel_of({v.rows, v.in}), -8, 0)),
          from_values({v.in, v.out}, v.dtype,
                      uniform_values(rng, numel_of({v.in, v.out}), -0.5f, 0.5f)),
          from_values({v.rows, v.out}, v.dtype,
                      uniform_values(rng, numel_of({v.rows, v.out}), -5.0f, 5.0f))};
    };
    bw.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor dpre = be.empty({v.rows, v.out}, v.dtype);
      Tensor scratch = be.empty({v.rows, v.out}, v.dtype);
      be.linear_gelu_backward_input(in[0], in[1], in[2], dpre, scratch);
      return std::vector<Tensor>{dpre};
    };
    bw.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      const std::vector<double> dy = in[0].values(), w2 = in[1].values(), pre = in[2].values();
      const double g = gamma_n(static_cast<double>(v.in + 2), 0x1p-23);
      std::vector<double> delta(pre.size());
      for (int64_t r = 0; r < v.rows; ++r) {
        for (int64_t o = 0; o < v.out; ++o) {
          double a = 0.0, s = 0.0;
          for (int64_t i = 0; i < v.in; ++i) {
            const double p =
                dy[static_cast<size_t>(r * v.in + i)] * w2[static_cast<size_t>(i * v.out + o)];
            a += p;
            s += std::fabs(p);
          }
          const size_t k = static_cast<size_t>(r * v.out + o);
          const double x = pre[k];
          const double d_acc = 2.0 * g * s + ulp(std::fabs(a) + g * s, v.dtype);
          const double d_grad =
              gelu_grad_side_error(x, kEpilogueTanh) +
              gelu_grad_side_error(x, kTranscendentalUlps * ulp_near(gelu_tanh_t(x)));
          const double gp = gelu_tanh_grad_exact(x);
          delta[k] = (std::fabs(gp) + d_grad) * d_acc + (std::fabs(a) + g * s) * d_grad +
                     2.0 * ulp_near(std::fabs(gp * a) + d_acc + d_grad);
        }
      }
      return std::vector<Spec>{within(delta)};
    };
    cases.push_back(bw);
  }
}

void add_dropout_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType in, out;
    float p;
    uint64_t seed, offset;
  };
  const Variant variants[] = {
      {DType::f32, DType::f32, 0.1f, 1, 0},
      {DType::f16, DType::f16, 0.5f, 0x123456789abcdefull, 7},
      {DType::bf16, DType::bf16, 0.3f, 42, 0x100000003ull},  // a 64-bit stream number
      {DType::f32, DType::f16, 0.25f, 9, 1},
      {DType::f16, DType::f32, 0.0f, 3, 2},  // keeps everything, scale 1
      {DType::f16, DType::f16, 1.0f, 3, 2},  // drops everything
  };
  constexpr int64_t n = 10007;
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = "dropout_" + tag(v.in) + "_to_" + tag(v.out) + "_p" +
             std::to_string(static_cast<int>(v.p * 100)) + "_offset" + std::to_string(v.offset);
    c.make_inputs = [v](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({n}, v.in, random_with_specials(rng, n, -10, 10, 0.002)),
          from_values({n}, v.in, random_values(rng, n, -10, 10))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty(in[0].shape(), v.out);
      Tensor dx = be.empty(in[1].shape(), v.out);
      be.dropout_forward(in[0], y, v.p, v.seed, v.offset);
      be.dropout_backward(in[1], dx, v.p, v.seed, v.offset);
      be.dropout_forward(in[0], in[0], v.p, v.seed, v.offset + 1);  // in place, the next call
      return std::vector<Tensor>{y, dx, in[0]};
    };
    cases.push_back(c);
  }
}

// ---- losses ----

struct XentVariant {
  DType logits;
  int64_t rows, cols;
  bool grad;
  DType dlogits;
  float grad_scale;
  const char* values;  // "random", "ties" (small integers), "nan_inf" (special rows)
};

void add_xent_cases(std::vector<CudaCase>& cases) {
  const XentVariant variants[] = {
      {DType::f32, 37, 10, true, DType::f32, 1.0f, "random"},
      {DType::f16, 64, 33, true, DType::f16, 65536.0f, "random"},
      {DType::bf16, 300, 1000, true, DType::bf16, 1024.0f, "random"},
      {DType::f16, 129, 10, true, DType::f32, 8.0f, "random"},
      {DType::f32, 1, 1, true, DType::f32, 1.0f, "random"},
      {DType::f32, 50, 7, false, DType::f32, 1.0f, "ties"},
      {DType::f16, 40, 12, true, DType::f16, 2.0f, "nan_inf"},
  };
  for (const XentVariant& v : variants) {
    CudaCase c;
    c.name = "softmax_cross_entropy_" + tag(v.logits) + "_" + std::to_string(v.rows) + "x" +
             std::to_string(v.cols) + (v.grad ? "_grad_" + tag(v.dlogits) : "_loss_only") + "_" +
             v.values;
    c.make_inputs = [v](std::mt19937_64& rng) {
      const size_t n = numel_of({v.rows, v.cols});
      std::vector<float> logits;
      const std::string kind = v.values;
      if (kind == "ties") {
        logits = small_integers(rng, n, 0, 2);
      } else {
        logits = uniform_values(rng, n, -8.0f, 8.0f);
        if (kind == "nan_inf") {
          logits[3 * static_cast<size_t>(v.cols) + 5] = NAN;
          logits[7 * static_cast<size_t>(v.cols)] = NAN;  // a NaN first in its row
          logits[9 * static_cast<size_t>(v.cols) + 2] = INFINITY;
          logits[11 * static_cast<size_t>(v.cols) + 1] = -INFINITY;
        }
      }
      std::vector<int32_t> labels(static_cast<size_t>(v.rows));
      std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(v.cols - 1));
      for (int32_t& l : labels) l = label(rng);
      return std::vector<HostInput>{from_values({v.rows, v.cols}, v.logits, logits),
                                    from_i32({v.rows}, labels), scalar_input(v.grad_scale)};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor loss = be.empty({1}, DType::f32);
      Tensor correct = be.empty({1}, DType::i32);
      Tensor dlogits = v.grad ? be.empty({v.rows, v.cols}, v.dlogits) : Tensor{};
      be.softmax_cross_entropy(in[0], in[1], loss, correct, dlogits, in[2]);
      std::vector<Tensor> out = {loss, correct};
      if (v.grad) out.push_back(dlogits);
      return out;
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      const std::vector<double> x = in[0].values(), labels = in[1].values();
      const double c_grad = -in[2].values()[0] / static_cast<double>(v.rows);
      const auto cols = static_cast<size_t>(v.cols);
      double loss_delta_sum = 0.0, loss_abs_sum = 0.0;
      std::vector<double> dgrad(x.size(), 0.0);
      for (size_t r = 0; r < static_cast<size_t>(v.rows); ++r) {
        const double* row = x.data() + r * cols;
        const double m = *std::max_element(row, row + cols);
        double sum = 0.0, sum_ulps = 0.0;
        for (size_t j = 0; j < cols; ++j) {
          const double e = std::exp(row[j] - m);
          sum += e;
          sum_ulps += kTranscendentalUlps * ulp_near(e);
        }
        const double lse = std::log(sum);
        // The sum of exponentials: reassociation of C terms and expf's ulps; log's derivative
        // 1 / sum turns its absolute difference into lse's, plus logf's ulps.
        const double d_sum = 2.0 * gamma_n(static_cast<double>(v.cols), kU) * sum + sum_ulps;
        const double d_lse = d_sum / sum + kTranscendentalUlps * ulp_near(lse);
        const size_t t = static_cast<size_t>(labels[r]);
        const double loss_r = lse - (row[t] - m);
        loss_delta_sum += d_lse + ulp_near(loss_r);
        loss_abs_sum += std::fabs(loss_r);
        for (size_t j = 0; j < cols; ++j) {
          // log_softmax_j = (x_j - max) - lse moves with lse; exp scales that by p_j; then the
          // product with c and the subtraction from the target's c round once each.
          const double ls = (row[j] - m) - lse;
          if (std::isinf(ls)) continue;  // a -inf logit: p = 0 and the gradient is c or 0 exactly
          const double p = std::exp(ls);
          const double d_ls = d_lse + ulp_near(ls);
          const double d_p = p * d_ls + kTranscendentalUlps * ulp_near(p);
          const double q = p * c_grad;
          const double d = (j == t ? c_grad : 0.0) - q;
          dgrad[r * cols + j] = std::fabs(c_grad) * d_p + ulp_near(q) + ulp_near(d);
        }
      }
      // The mean: R - 1 additions in two orders, then the division.
      const double rows = static_cast<double>(v.rows);
      const double mean = loss_abs_sum / rows;
      const double d_loss =
          (loss_delta_sum + 2.0 * gamma_n(rows, kU) * loss_abs_sum) / rows + ulp_near(mean);
      std::vector<Spec> specs = {within({d_loss}), bitwise()};
      if (v.grad) specs.push_back(within(dgrad));
      return specs;
    };
    cases.push_back(c);
    if (v.grad && v.dlogits == v.logits) {
      // The same case with the gradient written over the logits (backend.h: in place); the
      // same bounds, since in place must give the out-of-place bits on each backend.
      CudaCase in_place = c;
      in_place.name += "_in_place";
      in_place.run = [](Backend& be, std::vector<Tensor>& in) {
        Tensor loss = be.empty({1}, DType::f32);
        Tensor correct = be.empty({1}, DType::i32);
        be.softmax_cross_entropy(in[0], in[1], loss, correct, in[0], in[2]);
        return std::vector<Tensor>{loss, correct, in[0]};
      };
      cases.push_back(in_place);
    }
  }
}

void add_mse_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType pred;
    int64_t n;
    bool grad;
    DType dpred;
  };
  const Variant variants[] = {{DType::f32, 10007, true, DType::f32},
                              {DType::f16, 4099, true, DType::f16},
                              {DType::bf16, 1, true, DType::bf16},
                              {DType::f16, 300000, true, DType::f32},
                              {DType::f32, 77, false, DType::f32}};
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = "mse_" + tag(v.pred) + "_" + std::to_string(v.n) +
             (v.grad ? "_grad_" + tag(v.dpred) : "_loss_only");
    c.make_inputs = [v](std::mt19937_64& rng) {
      const auto n = static_cast<size_t>(v.n);
      return std::vector<HostInput>{from_values({v.n}, v.pred, random_values(rng, n, -6, 3)),
                                    from_values({v.n}, DType::f32, random_values(rng, n, -6, 3)),
                                    scalar_input(4096.0f)};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor loss = be.empty({1}, DType::f32);
      Tensor dpred = v.grad ? be.empty({v.n}, v.dpred) : Tensor{};
      be.mse(in[0], in[1], loss, dpred, in[2]);
      std::vector<Tensor> out = {loss};
      if (v.grad) out.push_back(dpred);
      return out;
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      // Each (pred - target)^2 is the same float on both; the n - 1 additions reassociate.
      const std::vector<double> p = in[0].values(), t = in[1].values();
      double s = 0.0;
      for (size_t i = 0; i < p.size(); ++i) {
        const double d = static_cast<double>(static_cast<float>(p[i] - t[i]));
        s += d * d;
      }
      const double n = static_cast<double>(v.n);
      std::vector<Spec> specs = {within({2.0 * gamma_n(n, kU) * s / n + ulp_near(s / n)})};
      if (v.grad) specs.push_back(bitwise());
      return specs;
    };
    cases.push_back(c);
  }
}

// ---- LayerNorm ----

struct RowStats {
  double mean, var, rstd;
  double d_mean, d_rstd;  // bounds of the float differences
};

// The forward statistics of a row of C values in double, and the first-order bounds of how far
// two float evaluations (different summation orders) can be apart.
RowStats row_stats(const double* x, int64_t cols, double eps) {
  const double c = static_cast<double>(cols);
  const double g = 2.0 * gamma_n(c, kU);
  double sum = 0.0, abs_sum = 0.0;
  for (int64_t j = 0; j < cols; ++j) {
    sum += x[j];
    abs_sum += std::fabs(x[j]);
  }
  RowStats s{};
  s.mean = sum / c;
  s.d_mean = g * abs_sum / c + ulp_near(s.mean);
  double sq = 0.0, d_sq = 0.0;
  for (int64_t j = 0; j < cols; ++j) {
    const double d = x[j] - s.mean;
    sq += d * d;
    d_sq += 2.0 * std::fabs(d) * (s.d_mean + ulp_near(d)) + ulp_near(d * d);
  }
  s.var = sq / c;
  const double d_var = (d_sq + g * sq) / c + ulp_near(s.var);
  const double root = std::sqrt(s.var + eps);
  const double d_root = (d_var + ulp_near(s.var + eps)) / (2.0 * root) + ulp_near(root);
  s.rstd = 1.0 / root;
  s.d_rstd = s.rstd * s.rstd * d_root + ulp_near(s.rstd);
  return s;
}

// The bounds of layer_norm_forward's y, mean and rstd for input rows x [rows, cols] (exact
// values) against the CPU: the statistics' reassociation, then each later operation.
std::vector<Spec> layer_norm_forward_specs(const std::vector<double>& x,
                                           const std::vector<double>& gamma,
                                           const std::vector<double>& beta, int64_t rows,
                                           int64_t n_cols, float eps) {
  const auto cols = static_cast<size_t>(n_cols);
  std::vector<double> dy(x.size()), dmean(static_cast<size_t>(rows)), drstd(dmean.size());
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const RowStats s = row_stats(x.data() + r * cols, n_cols, eps);
    dmean[r] = s.d_mean;
    drstd[r] = s.d_rstd;
    for (size_t j = 0; j < cols; ++j) {
      // ((x - mean) * rstd) * gamma + beta, each operation on differing operands.
      const double d = x[r * cols + j] - s.mean;
      const double d_d = s.d_mean + ulp_near(d);
      const double xhat = d * s.rstd;
      const double d_xhat = s.rstd * d_d + std::fabs(d) * s.d_rstd + ulp_near(xhat);
      const double yg = xhat * gamma[j];
      dy[r * cols + j] = std::fabs(gamma[j]) * d_xhat + ulp_near(yg) + ulp_near(yg + beta[j]);
    }
  }
  return std::vector<Spec>{within(dy), within(dmean), within(drstd)};
}

void add_layer_norm_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType x, y;
    int64_t rows, cols;
  };
  const Variant forward[] = {{DType::f32, DType::f32, 37, 45},
                             {DType::f16, DType::f16, 300, 1024},
                             {DType::bf16, DType::bf16, 8, 4099},
                             {DType::f16, DType::f32, 1, 1},
                             {DType::f32, DType::bf16, 64, 33}};
  constexpr float kEps = 1e-5f;
  for (const Variant& v : forward) {
    CudaCase c;
    c.name = "layer_norm_forward_" + tag(v.x) + "_to_" + tag(v.y) + "_" + std::to_string(v.rows) +
             "x" + std::to_string(v.cols);
    c.make_inputs = [v](std::mt19937_64& rng) {
      // An offset per row, so the mean matters and the centring cancels.
      std::vector<float> x = random_values(rng, numel_of({v.rows, v.cols}), -4, 2);
      for (int64_t r = 0; r < v.rows; ++r) {
        const float shift = random_value(rng, -2, 3);
        for (int64_t j = 0; j < v.cols; ++j) x[static_cast<size_t>(r * v.cols + j)] += shift;
      }
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, v.x, x),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), 0.5f, 1.5f)),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), -0.5f, 0.5f))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty({v.rows, v.cols}, v.y);
      Tensor mean = be.empty({v.rows}, DType::f32);
      Tensor rstd = be.empty({v.rows}, DType::f32);
      be.layer_norm_forward(in[0], in[1], in[2], y, mean, rstd, kEps);
      return std::vector<Tensor>{y, mean, rstd};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      return layer_norm_forward_specs(in[0].values(), in[1].values(), in[2].values(), v.rows,
                                      v.cols, kEps);
    };
    cases.push_back(c);
  }

  // residual_layer_norm_forward: sum = x + r is the same float operation on both (bitwise);
  // y, mean and rstd are LayerNorm of that sum, with the forward's bounds. 48 and 2048 columns
  // take the kernel's shared-memory and its re-read path; the in-place rows write sum over x.
  struct ResidualVariant {
    DType r, y;
    int64_t rows, cols;
    bool in_place;
  };
  const ResidualVariant residual[] = {
      {DType::f32, DType::f32, 37, 45, false},    {DType::f16, DType::f16, 300, 768, false},
      {DType::bf16, DType::bf16, 9, 2048, false}, {DType::f16, DType::f32, 1, 1, false},
      {DType::bf16, DType::f16, 64, 33, true},    {DType::f32, DType::bf16, 17, 1600, true}};
  for (const ResidualVariant& v : residual) {
    CudaCase c;
    c.name = "residual_layer_norm_forward_r" + tag(v.r) + "_to_" + tag(v.y) + "_" +
             std::to_string(v.rows) + "x" + std::to_string(v.cols) +
             (v.in_place ? "_in_place" : "");
    c.make_inputs = [v](std::mt19937_64& rng) {
      const size_t n = numel_of({v.rows, v.cols});
      std::vector<float> x = random_values(rng, n, -4, 2);
      for (int64_t r = 0; r < v.rows; ++r) {
        const float shift = random_value(rng, -2, 3);
        for (int64_t j = 0; j < v.cols; ++j) x[static_cast<size_t>(r * v.cols + j)] += shift;
      }
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, DType::f32, x),
          from_values({v.rows, v.cols}, v.r, random_values(rng, n, -5, 1)),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), 0.5f, 1.5f)),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), -0.5f, 0.5f))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor sum = v.in_place ? in[0] : be.empty({v.rows, v.cols}, DType::f32);
      Tensor y = be.empty({v.rows, v.cols}, v.y);
      Tensor mean = be.empty({v.rows}, DType::f32);
      Tensor rstd = be.empty({v.rows}, DType::f32);
      be.residual_layer_norm_forward(in[0], in[1], sum, in[2], in[3], y, mean, rstd, kEps);
      return std::vector<Tensor>{sum, y, mean, rstd};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>& want) {
      // The statistics' input is the sum, the same bits on both sides (output 0, bitwise).
      std::vector<Spec> specs = {bitwise()};
      for (Spec& s : layer_norm_forward_specs(want[0], in[2].values(), in[3].values(), v.rows,
                                              v.cols, kEps)) {
        specs.push_back(std::move(s));
      }
      return specs;
    };
    cases.push_back(c);
  }

  struct BackwardVariant {
    DType x, dy, dx;
    int64_t rows, cols;
    bool want_dx, want_params;
    // layer_norm_backward_accumulate: dx (input 7) += the gradient.
    bool accumulate = false;
  };
  // 1100 rows: several 512-row chunks for the parameter gradients.
  const BackwardVariant backward[] = {
      {DType::f32, DType::f32, DType::f32, 37, 45, true, true},
      {DType::f16, DType::f16, DType::f16, 1100, 37, true, true},
      {DType::bf16, DType::bf16, DType::bf16, 3, 1000, true, true},
      {DType::f16, DType::f32, DType::f16, 64, 257, true, false},
      {DType::f32, DType::f16, DType::f32, 600, 20, false, true},
      {DType::f32, DType::f16, DType::f32, 1100, 37, true, true, true},
      {DType::f32, DType::bf16, DType::f32, 64, 768, true, true, true},
      {DType::f16, DType::f16, DType::f16, 33, 100, true, false, true},
  };
  for (const BackwardVariant& v : backward) {
    CudaCase c;
    c.name = "layer_norm_backward_" + tag(v.x) + "_dy" + tag(v.dy) + "_dx" + tag(v.dx) + "_" +
             std::to_string(v.rows) + "x" + std::to_string(v.cols) + (v.want_dx ? "" : "_no_dx") +
             (v.want_params ? "" : "_no_param_grads") + (v.accumulate ? "_accumulate" : "");
    c.make_inputs = [v](std::mt19937_64& rng) {
      const size_t n = numel_of({v.rows, v.cols});
      std::vector<float> x = random_values(rng, n, -4, 2);
      for (float& e : x) e += 1.5f;
      // The saved statistics, as the forward pass would have left them (any floats will do:
      // both backends read the same ones).
      std::vector<float> mean(static_cast<size_t>(v.rows)), rstd(mean.size());
      for (size_t r = 0; r < mean.size(); ++r) {
        std::vector<double> row(static_cast<size_t>(v.cols));
        for (size_t j = 0; j < row.size(); ++j) {
          row[j] = decode(encode(x[r * row.size() + j], v.x), v.x);
        }
        const RowStats s = row_stats(row.data(), v.cols, 1e-5);
        mean[r] = static_cast<float>(s.mean);
        rstd[r] = static_cast<float>(s.rstd);
      }
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, v.x, x),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), 0.5f, 1.5f)),
          from_values({v.rows}, DType::f32, mean),
          from_values({v.rows}, DType::f32, rstd),
          from_values({v.rows, v.cols}, v.dy, random_values(rng, n, -8, 0)),
          from_values({v.cols}, DType::f32, random_values(rng, static_cast<size_t>(v.cols), -4, 0)),
          from_values({v.cols}, DType::f32, random_values(rng, static_cast<size_t>(v.cols), -4, 0)),
          from_values({v.rows, v.cols}, v.dx, random_values(rng, n, -6, 0))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      if (v.accumulate) {
        // The CPU composes it in the scratch; the GPU adds in its row kernel.
        Tensor dx = in[7];
        be.layer_norm_backward_accumulate(
            in[0], in[1], in[2], in[3], in[4], dx, v.want_params ? in[5] : Tensor{},
            v.want_params ? in[6] : Tensor{}, be.empty({v.rows * v.cols}, DType::f32));
        return std::vector<Tensor>{dx, in[5], in[6]};
      }
      Tensor dx = v.want_dx ? be.empty({v.rows, v.cols}, v.dx) : Tensor{};
      be.layer_norm_backward(in[0], in[1], in[2], in[3], in[4], dx,
                             v.want_params ? in[5] : Tensor{}, v.want_params ? in[6] : Tensor{});
      std::vector<Tensor> out;
      if (v.want_dx) out.push_back(dx);
      out.push_back(in[5]);  // unchanged when not wanted: bitwise then
      out.push_back(in[6]);
      return out;
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      const std::vector<double> x = in[0].values(), gamma = in[1].values(), mean = in[2].values(),
                                rstd = in[3].values(), dy = in[4].values(), dg0 = in[5].values(),
                                db0 = in[6].values(), dx0 = in[7].values();
      const auto cols = static_cast<size_t>(v.cols);
      const auto rows = static_cast<size_t>(v.rows);
      const double gc = 2.0 * gamma_n(static_cast<double>(v.cols), kU);
      const double scale = 1.0 / static_cast<double>(v.cols);
      std::vector<double> ddx(x.size());
      std::vector<double> g_abs(cols, 0.0), b_abs(cols, 0.0), g_sum(cols, 0.0), b_sum(cols, 0.0);
      for (size_t r = 0; r < rows; ++r) {
        const double a = rstd[r], mu = mean[r];
        double ds = 0.0, db = 0.0, ds_abs = 0.0, db_abs = 0.0;
        for (size_t j = 0; j < cols; ++j) {
          const double dyg = dy[r * cols + j] * gamma[j];
          ds += dyg * x[r * cols + j];
          db += dyg;
          ds_abs += std::fabs(dyg * x[r * cols + j]);
          db_abs += std::fabs(dyg);
          const double term = dy[r * cols + j] * ((x[r * cols + j] - mu) * a);
          g_sum[j] += term;
          g_abs[j] += std::fabs(term);
          b_sum[j] += dy[r * cols + j];
          b_abs[j] += std::fabs(dy[r * cols + j]);
        }
        // b = (db * mean - ds) * a^3 / C and c = -b * mean - db * a / C, first order in the
        // sums' differences plus one relative float ulp (2^-23) per operation.
        const double d_ds = gc * ds_abs, d_db = gc * db_abs;
        const double t1 = db * mu, t2 = t1 - ds;
        const double d_t2 = std::fabs(mu) * d_db + d_ds + 0x1p-23 * (std::fabs(t1) + std::fabs(t2));
        const double b = t2 * a * a * a * scale;
        const double d_b = a * a * a * scale * d_t2 + 4 * 0x1p-23 * std::fabs(b);
        const double cc = -b * mu - db * a * scale;
        const double d_c =
            std::fabs(mu) * d_b + a * scale * d_db +
            0x1p-23 * (std::fabs(b * mu) + 2 * std::fabs(db * a * scale) + std::fabs(cc));
        for (size_t j = 0; j < cols; ++j) {
          const double xv = x[r * cols + j];
          const double first = a * dy[r * cols + j] * gamma[j];
          const double dx = first + b * xv + cc;
          ddx[r * cols + j] =
              std::fabs(xv) * d_b + d_c +
              0x1p-23 * (std::fabs(b * xv) + std::fabs(first + b * xv) + std::fabs(dx));
          // The accumulate form adds the old dx to values that differ by that, one rounding.
          if (v.accumulate) ddx[r * cols + j] += ulp_near(dx0[r * cols + j] + dx);
        }
      }
      std::vector<Spec> specs;
      if (v.want_dx) specs.push_back(within(ddx));
      if (!v.want_params) {
        specs.push_back(bitwise());
        specs.push_back(bitwise());
        return specs;
      }
      // The column sums over R rows in two orders, then one addition to the old gradient.
      const double gr = 2.0 * gamma_n(static_cast<double>(v.rows), kU);
      std::vector<double> d_dgamma(cols), d_dbeta(cols);
      for (size_t j = 0; j < cols; ++j) {
        d_dgamma[j] = gr * g_abs[j] + ulp_near(dg0[j] + g_sum[j]);
        d_dbeta[j] = gr * b_abs[j] + ulp_near(db0[j] + b_sum[j]);
      }
      specs.push_back(within(d_dgamma));
      specs.push_back(within(d_dbeta));
      return specs;
    };
    cases.push_back(c);
  }
}

// ---- clip_coef ----

void add_clip_cases(std::vector<CudaCase>& cases) {
  for (float max_norm : {1.0f, 0.3f, 1e-3f}) {
    CudaCase c;
    c.name = "clip_coef_max" + std::to_string(static_cast<int>(max_norm * 1000));
    c.make_inputs = [](std::mt19937_64& rng) {
      std::vector<float> norms = {0.0f, 1e-7f, 0.29999998f, 0.3f,     0.5f,
                                  1.0f, 5.0f,  3e38f,       INFINITY, NAN};
      for (int i = 0; i < 50; ++i) norms.push_back(std::fabs(random_value(rng, -20, 20)));
      return std::vector<HostInput>{
          from_values({static_cast<int64_t>(norms.size())}, DType::f32, norms)};
    };
    c.run = [max_norm](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.empty(in[0].shape(), DType::f32);
      for (size_t i = 0; i < in[0].numel(); ++i) {
        be.clip_coef(in[0].view(i, {1}), max_norm, out.view(i, {1}));
      }
      return std::vector<Tensor>{out};
    };
    cases.push_back(c);
  }
}

// ---- RMSNorm and SwiGLU (the Llama / Qwen block) ----

// The bounds of rms_norm_forward's y and rstd against the CPU for rows x (exact values, of dtype
// xt): the sum of squares reassociates (2 gamma_C(u) S + an ulp), then sqrt(S / C + eps) and the
// reciprocal each add an ulp of a differing operand; h = x rstd adds |x| d_rstd and an ulp, its
// rounding to a lowp x's dtype one ulp of that dtype (round_bound), y = w h |w| times that and an
// ulp.
std::vector<Spec> rms_norm_forward_specs(const std::vector<double>& x, const std::vector<double>& w,
                                         DType xt, int64_t rows, int64_t n_cols, float eps) {
  const auto cols = static_cast<size_t>(n_cols);
  const double c = static_cast<double>(n_cols);
  std::vector<double> dy(x.size()), drstd(static_cast<size_t>(rows));
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    double sq = 0.0;
    for (size_t j = 0; j < cols; ++j) sq += x[r * cols + j] * x[r * cols + j];
    const double d_sq = 2.0 * gamma_n(c, kU) * sq + ulp_near(sq);
    const double ms = sq / c;
    const double d_ms = d_sq / c + ulp_near(ms);
    const double root = std::sqrt(ms + eps);
    const double d_root = (d_ms + ulp_near(ms + eps)) / (2.0 * root) + ulp_near(root);
    const double a = 1.0 / root;
    drstd[r] = a * a * d_root + ulp_near(a);
    for (size_t j = 0; j < cols; ++j) {
      const double h = x[r * cols + j] * a;
      double d_h = std::fabs(x[r * cols + j]) * drstd[r] + ulp_near(h);
      if (xt != DType::f32) d_h = round_bound(h, d_h, xt);
      dy[r * cols + j] = std::fabs(w[j]) * d_h + ulp_near(w[j] * h);
    }
  }
  return std::vector<Spec>{within(dy), within(drstd)};
}

void add_rms_norm_cases(std::vector<CudaCase>& cases) {
  constexpr float kEps = 1e-6f;
  struct Variant {
    DType x, y;
    int64_t rows, cols;
  };
  // Qwen3's q/k norm: rows of head_dim 64 / 128 in lowp x to an f32 y (the RoPE's input).
  const Variant forward[] = {{DType::f32, DType::f16, 37, 45}, {DType::f32, DType::bf16, 300, 1024},
                             {DType::f16, DType::f32, 96, 64}, {DType::bf16, DType::f32, 40, 128},
                             {DType::f16, DType::f16, 1, 1},   {DType::f32, DType::f32, 8, 4099}};
  auto rows_of = [](std::mt19937_64& rng, int64_t rows, int64_t cols) {
    std::vector<float> x = random_values(rng, numel_of({rows, cols}), -4, 2);
    for (int64_t r = 0; r < rows; ++r) {  // rows at varied scales
      const float s = std::ldexp(1.0f, static_cast<int>(r % 9) - 4);
      for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(r * cols + j)] *= s;
    }
    return x;
  };
  for (const Variant& v : forward) {
    CudaCase c;
    c.name = "rms_norm_forward_" + tag(v.x) + "_to_" + tag(v.y) + "_" + std::to_string(v.rows) +
             "x" + std::to_string(v.cols);
    c.make_inputs = [v, rows_of](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, v.x, rows_of(rng, v.rows, v.cols)),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), -1.5f, 1.5f))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty({v.rows, v.cols}, v.y), rstd = be.empty({v.rows}, DType::f32);
      be.rms_norm_forward(in[0], in[1], y, rstd, kEps);
      return std::vector<Tensor>{y, rstd};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      return rms_norm_forward_specs(in[0].values(), in[1].values(), v.x, v.rows, v.cols, kEps);
    };
    cases.push_back(c);
  }

  // residual_rms_norm_forward: the sum is the same float add on both (bitwise), then the forward's
  // bounds on it; in place writes the sum over x.
  struct ResidualVariant {
    DType r, y;
    int64_t rows, cols;
    bool in_place;
  };
  const ResidualVariant residual[] = {{DType::f16, DType::f16, 300, 768, false},
                                      {DType::bf16, DType::bf16, 9, 2048, true},
                                      {DType::f32, DType::f32, 17, 45, false}};
  for (const ResidualVariant& v : residual) {
    CudaCase c;
    c.name = "residual_rms_norm_forward_r" + tag(v.r) + "_to_" + tag(v.y) + "_" +
             std::to_string(v.rows) + "x" + std::to_string(v.cols) +
             (v.in_place ? "_in_place" : "");
    c.make_inputs = [v, rows_of](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, DType::f32, rows_of(rng, v.rows, v.cols)),
          from_values({v.rows, v.cols}, v.r, random_values(rng, numel_of({v.rows, v.cols}), -5, 1)),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), 0.5f, 1.5f))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor sum = v.in_place ? in[0] : be.empty({v.rows, v.cols}, DType::f32);
      Tensor y = be.empty({v.rows, v.cols}, v.y), rstd = be.empty({v.rows}, DType::f32);
      be.residual_rms_norm_forward(in[0], in[1], sum, in[2], y, rstd, kEps);
      return std::vector<Tensor>{sum, y, rstd};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>& want) {
      std::vector<Spec> specs = {bitwise()};
      for (Spec& sp :
           rms_norm_forward_specs(want[0], in[2].values(), DType::f32, v.rows, v.cols, kEps)) {
        specs.push_back(std::move(sp));
      }
      return specs;
    };
    cases.push_back(c);
  }

  // Backward from the same rstd (an input, computed on the host): g = round_x(dy w) is the same
  // float on both; dot = sum g x reassociates (2 gamma_C sum |g x| + an ulp), b = -dot a^3 / C
  // carries it times a^3 / C plus 5 ulps of b, dx = a g + b x adds |x| d_b and two ulps (three with
  // accumulate); dweight's column sums over R rows reassociate (2 gamma_R sum |dy round_x(x a)|)
  // plus an ulp of the sum and one of its addition to the existing gradient.
  struct BackwardVariant {
    DType x, dy, dx;
    int64_t rows, cols;
    bool accumulate;
  };
  const BackwardVariant backward[] = {{DType::f32, DType::f16, DType::f32, 1100, 64, true},
                                      {DType::f16, DType::f16, DType::f16, 300, 128, false},
                                      {DType::f32, DType::bf16, DType::f32, 33, 1000, true},
                                      {DType::bf16, DType::f32, DType::bf16, 64, 257, false}};
  for (const BackwardVariant& v : backward) {
    CudaCase c;
    c.name = "rms_norm_backward_" + tag(v.x) + "_dy" + tag(v.dy) + "_dx" + tag(v.dx) + "_" +
             std::to_string(v.rows) + "x" + std::to_string(v.cols) +
             (v.accumulate ? "_accumulate" : "");
    c.make_inputs = [v, rows_of](std::mt19937_64& rng) {
      const std::vector<float> x = rows_of(rng, v.rows, v.cols);
      std::vector<float> rstd(static_cast<size_t>(v.rows));
      for (int64_t r = 0; r < v.rows; ++r) {
        double sq = 0;
        for (int64_t j = 0; j < v.cols; ++j) {
          const double e = decode(encode(x[static_cast<size_t>(r * v.cols + j)], v.x), v.x);
          sq += e * e;
        }
        rstd[static_cast<size_t>(r)] =
            static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(v.cols) + kEps));
      }
      const size_t n = numel_of({v.rows, v.cols});
      return std::vector<HostInput>{
          from_values({v.rows, v.cols}, v.x, x),
          from_values({v.cols}, DType::f32,
                      uniform_values(rng, static_cast<size_t>(v.cols), -1.5f, 1.5f)),
          from_values({v.rows}, DType::f32, rstd),
          from_values({v.rows, v.cols}, v.dy, random_values(rng, n, -6, 3)),
          from_values({v.rows, v.cols}, v.dx, random_values(rng, n, -4, 2)),
          from_values({v.cols}, DType::f32,
                      random_values(rng, static_cast<size_t>(v.cols), -3, 0))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      const Tensor dx = v.accumulate ? in[4] : be.empty({v.rows, v.cols}, v.dx);
      const Tensor dyw = be.empty({v.rows, v.cols}, DType::f32);
      be.rms_norm_backward(in[0], in[1], in[2], in[3], dx, in[5], v.accumulate, dyw);
      return std::vector<Tensor>{dx, in[5], dyw};
    };
    c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>& want) {
      const std::vector<double> x = in[0].values(), w = in[1].values(), a = in[2].values(),
                                dy = in[3].values(), dx0 = in[4].values();
      const auto cols = static_cast<size_t>(v.cols);
      const double c_ = static_cast<double>(v.cols);
      std::vector<double> ddx(x.size()), ddw(cols, 0.0), mag(cols, 0.0);
      for (size_t r = 0; r < static_cast<size_t>(v.rows); ++r) {
        double dot = 0, absdot = 0;
        for (size_t j = 0; j < cols; ++j) {
          const double g = decode(encode(static_cast<float>(dy[r * cols + j] * w[j]), v.x), v.x);
          dot += g * x[r * cols + j];
          absdot += std::fabs(g * x[r * cols + j]);
          const double h = decode(encode(static_cast<float>(x[r * cols + j] * a[r]), v.x), v.x);
          mag[j] += std::fabs(dy[r * cols + j] * h);
        }
        const double a3 = a[r] * a[r] * a[r];
        const double d_dot = 2.0 * gamma_n(c_, kU) * absdot + ulp_near(dot);
        const double b = -dot * a3 / c_;
        const double d_b = d_dot * a3 / c_ + 5.0 * ulp_near(b);
        for (size_t j = 0; j < cols; ++j) {
          const double g = decode(encode(static_cast<float>(dy[r * cols + j] * w[j]), v.x), v.x);
          const double val = a[r] * g + b * x[r * cols + j];
          double d =
              std::fabs(x[r * cols + j]) * d_b + ulp_near(b * x[r * cols + j]) + ulp_near(val);
          if (v.accumulate) d += ulp_near(val + dx0[r * cols + j]);
          ddx[r * cols + j] = d;
        }
      }
      for (size_t j = 0; j < cols; ++j) {
        ddw[j] = 2.0 * gamma_n(static_cast<double>(v.rows), kU) * mag[j] + ulp_near(mag[j]) +
                 ulp_near(want[1][j]);
      }
      return std::vector<Spec>{within(ddx), within(ddw), bitwise()};  // dy_weight: one product
    };
    cases.push_back(c);
  }
}

// SwiGLU: the two sides differ only by expf (kTranscendentalUlps ulps of exp(-g)); each later
// float operation adds an ulp of its result, a rounding to the inputs' lowp dtype one ulp of that
// dtype (round_bound), first order throughout:
//   forward: den = 1 + e, s = g / den (|g| / den^2 d_den), round_in(s), y = s u;
//   backward: sigmoid = 1 / den (d_den / den^2), dgate = ((ds sigmoid) (1 + g (1 - sigmoid))) with
//   ds = round_in(dy u) the same on both; dup = dy round_in(s).
struct SwigluDelta {
  double d_s, d_sig;  // the differences of round_in(silu(g)) and of sigmoid(g)
};
SwigluDelta swiglu_delta(double g, DType in) {
  const double e = std::exp(-g), den = 1.0 + e;
  const double d_den = kTranscendentalUlps * ulp_near(e) + ulp_near(den);
  const double s = g / den;
  double d_s = std::fabs(g) / (den * den) * d_den + ulp_near(s);
  if (in != DType::f32) d_s = round_bound(s, d_s, in);
  const double sig = 1.0 / den;
  return {d_s, d_den / (den * den) + ulp_near(sig)};
}

void add_swiglu_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType in, out;
    int64_t rows, width;
  };
  const Variant variants[] = {{DType::f16, DType::f16, 300, 352},
                              {DType::bf16, DType::bf16, 64, 1000},
                              {DType::f32, DType::f32, 33, 45},
                              {DType::f16, DType::f32, 17, 64},
                              {DType::bf16, DType::f16, 1, 1}};
  for (const Variant& v : variants) {
    for (bool backward : {false, true}) {
      CudaCase c;
      c.name = std::string(backward ? "swiglu_backward_" : "swiglu_forward_") + tag(v.in) + "_to_" +
               tag(v.out) + "_" + std::to_string(v.rows) + "x" + std::to_string(v.width);
      c.make_inputs = [v](std::mt19937_64& rng) {
        std::vector<float> gu = uniform_values(rng, numel_of({v.rows, 2 * v.width}), -12.0f, 12.0f);
        for (int64_t r = 0; r < v.rows; ++r) {  // the up half at mixed scales
          for (int64_t j = v.width; j < 2 * v.width; ++j) {
            gu[static_cast<size_t>(r * 2 * v.width + j)] = random_value(rng, -3, 2);
          }
        }
        return std::vector<HostInput>{
            from_values({v.rows, 2 * v.width}, v.in, gu),
            from_values({v.rows, v.width}, v.out,
                        random_with_specials(rng, numel_of({v.rows, v.width}), -6, 4, 0.001))};
      };
      c.run = [v, backward](Backend& be, std::vector<Tensor>& in) {
        if (backward) {
          Tensor d = be.empty({v.rows, 2 * v.width}, v.out);
          Tensor dyu = be.empty({v.rows, v.width}, DType::f32);
          be.swiglu_backward(in[0], in[1], d, dyu);
          return std::vector<Tensor>{d, dyu};
        }
        Tensor y = be.empty({v.rows, v.width}, v.out);
        be.swiglu_forward(in[0], y);
        return std::vector<Tensor>{y};
      };
      c.specs = [v, backward](const std::vector<HostInput>& in,
                              const std::vector<std::vector<double>>&) {
        const std::vector<double> gu = in[0].values(), dy = in[1].values();
        const auto w = static_cast<size_t>(v.width);
        std::vector<double> delta(backward ? gu.size() : dy.size());
        for (size_t r = 0; r < static_cast<size_t>(v.rows); ++r) {
          for (size_t j = 0; j < w; ++j) {
            const double g = gu[r * 2 * w + j], u = gu[r * 2 * w + w + j], t = dy[r * w + j];
            const SwigluDelta sd = swiglu_delta(g, v.in);
            const double s = g / (1.0 + std::exp(-g));
            if (!backward) {
              delta[r * w + j] = std::fabs(u) * sd.d_s + ulp_near(s * u);
              continue;
            }
            const double ds = decode(encode(static_cast<float>(t * u), v.in), v.in);
            const double sig = 1.0 / (1.0 + std::exp(-g));
            const double t1 = ds * sig, om = 1.0 - sig, pp = 1.0 + g * om;
            const double d_t1 = std::fabs(ds) * sd.d_sig + ulp_near(t1);
            const double d_om = sd.d_sig + ulp_near(om);
            const double d_pp = std::fabs(g) * d_om + ulp_near(g * om) + ulp_near(pp);
            delta[r * 2 * w + j] = std::fabs(t1) * d_pp + std::fabs(pp) * d_t1 + ulp_near(t1 * pp);
            delta[r * 2 * w + w + j] = std::fabs(t) * sd.d_s + ulp_near(t * s);
          }
        }
        if (backward) return std::vector<Spec>{within(delta), bitwise()};  // dy_up: one product
        return std::vector<Spec>{within(delta)};
      };
      cases.push_back(c);
    }
  }
}

std::vector<CudaCase> nn_cases() {
  std::vector<CudaCase> cases;
  add_linear_cases(cases);
  add_linear_gelu_cases(cases);
  add_sum_rows_cases(cases);
  add_activation_cases(cases);
  add_dropout_cases(cases);
  add_xent_cases(cases);
  add_mse_cases(cases);
  add_layer_norm_cases(cases);
  add_rms_norm_cases(cases);
  add_swiglu_cases(cases);
  add_clip_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Nn, nn_cases);

// ---- properties of the GPU alone ----

// Every reduction runs in an order fixed by the shape (and linear_forward's cuBLASLt algorithm is
// chosen once), so repeating an op on the same inputs gives the same bits.
TEST(CudaNnDeterminism, RepeatedRunsAreBitwiseIdentical) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  std::mt19937_64 rng(12);
  Backend& be = gpu();
  const int64_t rows = 2048, in = 1024, out = 384, classes = 1000;
  Tensor x = upload_values(be, {rows, in}, DType::f16, random_values(rng, rows * in, -3, 2));
  Tensor w = upload_values(be, {out, in}, DType::f16, random_values(rng, out * in, -6, 0));
  Tensor b = upload_values(be, {out}, DType::f32, random_values(rng, out, -3, 0));
  Tensor logits =
      upload_values(be, {rows, classes}, DType::f16, random_values(rng, rows * classes, -3, 3));
  std::vector<int32_t> label_values(rows);
  for (auto& l : label_values) l = static_cast<int32_t>(rng() % classes);
  Tensor labels = upload_i32(be, {rows}, label_values);
  Tensor gamma = upload_values(be, {in}, DType::f32, uniform_values(rng, in, 0.5f, 1.5f));
  Tensor beta = upload_values(be, {in}, DType::f32, uniform_values(rng, in, -0.5f, 0.5f));
  Tensor dy = upload_values(be, {rows, in}, DType::f16, random_values(rng, rows * in, -8, 0));
  Tensor target = upload_values(be, {rows, in}, DType::f32, random_values(rng, rows * in, -3, 2));
  Tensor grad_scale = scalar_f32(be, 1024.0f);

  struct Named {
    const char* name;
    Tensor tensor;
  };
  auto run_all = [&] {
    Tensor y = be.empty({rows, out}, DType::f16);
    be.linear_forward(x, w, b, y);
    Tensor bias_grad = be.empty({in}, DType::f32);
    be.sum_rows(dy, bias_grad);
    Tensor loss = be.empty({1}, DType::f32), correct = be.empty({1}, DType::i32);
    Tensor dlogits = be.empty({rows, classes}, DType::f16);
    be.softmax_cross_entropy(logits, labels, loss, correct, dlogits, grad_scale);
    Tensor mse_loss = be.empty({1}, DType::f32);
    be.mse(x, target, mse_loss, Tensor{}, Tensor{});
    Tensor ln_y = be.empty({rows, in}, DType::f16);
    Tensor mean = be.empty({rows}, DType::f32), rstd = be.empty({rows}, DType::f32);
    be.layer_norm_forward(x, gamma, beta, ln_y, mean, rstd, 1e-5f);
    Tensor dx = be.empty({rows, in}, DType::f16);
    Tensor dgamma = be.zeros({in}, DType::f32), dbeta = be.zeros({in}, DType::f32);
    be.layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    const Named outs[] = {
        {"linear_forward", y},         {"sum_rows", bias_grad},    {"xent loss", loss},
        {"xent correct", correct},     {"xent dlogits", dlogits},  {"mse loss", mse_loss},
        {"layer_norm y", ln_y},        {"layer_norm rstd", rstd},  {"layer_norm dx", dx},
        {"layer_norm dgamma", dgamma}, {"layer_norm dbeta", dbeta}};
    std::vector<std::vector<uint32_t>> bits;
    for (const Named& o : outs) bits.push_back(download_bits(be, o.tensor));
    return bits;
  };
  const char* names[] = {"linear_forward",    "sum_rows",        "xent loss",
                         "xent correct",      "xent dlogits",    "mse loss",
                         "layer_norm y",      "layer_norm rstd", "layer_norm dx",
                         "layer_norm dgamma", "layer_norm dbeta"};
  const auto first = run_all();
  for (int rep = 1; rep < 3; ++rep) {
    const auto again = run_all();
    for (size_t k = 0; k < first.size(); ++k) {
      BitwiseCheck check(DType::f32);  // bit patterns compared as 32-bit words
      check.add_all(again[k], first[k]);
      EXPECT_TRUE(check.ok()) << names[k] << ", repetition " << rep << ": " << check.report();
    }
  }
}

// The fused residual add + LayerNorm kernel against the composed ops on the GPU itself
// (copy, add_, layer_norm_forward): bitwise, as kernels/nn_layer_norm.cu promises (the same float
// operations in the same order), on the shared-memory path (C <= 1536) and the re-read path, in
// place and not. Likewise layer_norm_backward_accumulate against layer_norm_backward into an f32
// buffer followed by add_, and the in-place classifier against the out-of-place one.
TEST(CudaFusedNorm, FusedOpsAreBitwiseTheComposedOnes) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& be = gpu();
  constexpr float kEps = 1e-5f;
  struct Variant {
    int64_t rows, cols;
    DType r, y;
    bool in_place;
  };
  const Variant variants[] = {{1024, 768, DType::f16, DType::f16, false},
                              {77, 1536, DType::bf16, DType::bf16, true},
                              {33, 2049, DType::f32, DType::f16, false},
                              {5, 31, DType::f16, DType::f32, true}};
  for (const Variant& v : variants) {
    const std::string what = std::to_string(v.rows) + "x" + std::to_string(v.cols) + " " +
                             tag(v.r) + (v.in_place ? " in place" : "");
    std::mt19937_64 rng(seed_of(what));
    const Shape rc{v.rows, v.cols};
    const size_t n = numel_of(rc);
    std::vector<float> xv = random_values(rng, n, -4, 2);
    for (float& e : xv) e += 0.75f;
    const Tensor r = upload_values(be, rc, v.r, random_values(rng, n, -5, 1));
    const Tensor gamma = upload_values(
        be, {v.cols}, DType::f32, uniform_values(rng, static_cast<size_t>(v.cols), 0.5f, 1.5f));
    const Tensor beta = upload_values(
        be, {v.cols}, DType::f32, uniform_values(rng, static_cast<size_t>(v.cols), -0.5f, 0.5f));
    const Tensor x0 = upload_values(be, rc, DType::f32, xv);
    const Tensor sum0 = be.empty(rc, DType::f32), y0 = be.empty(rc, v.y);
    const Tensor m0 = be.empty({v.rows}, DType::f32), s0 = be.empty({v.rows}, DType::f32);
    be.copy(sum0, x0);
    be.add_(sum0, r);
    be.layer_norm_forward(sum0, gamma, beta, y0, m0, s0, kEps);
    const Tensor x1 = upload_values(be, rc, DType::f32, xv);
    const Tensor sum1 = v.in_place ? x1 : be.empty(rc, DType::f32), y1 = be.empty(rc, v.y);
    const Tensor m1 = be.empty({v.rows}, DType::f32), s1 = be.empty({v.rows}, DType::f32);
    be.residual_layer_norm_forward(x1, r, sum1, gamma, beta, y1, m1, s1, kEps);
    EXPECT_EQ(download_bits(be, sum1), download_bits(be, sum0)) << what << ": sum";
    EXPECT_EQ(download_bits(be, y1), download_bits(be, y0)) << what << ": y";
    EXPECT_EQ(download_bits(be, m1), download_bits(be, m0)) << what << ": mean";
    EXPECT_EQ(download_bits(be, s1), download_bits(be, s0)) << what << ": rstd";

    // Backward into the stream's f32 gradient, from the statistics just computed.
    const Tensor dy = upload_values(be, rc, v.r, random_values(rng, n, -8, 0));
    const std::vector<float> g_start = random_values(rng, n, -6, 0);
    const std::vector<float> p_start = random_values(rng, static_cast<size_t>(v.cols), -4, 0);
    const Tensor g0 = upload_values(be, rc, DType::f32, g_start);
    const Tensor dg0 = upload_values(be, {v.cols}, DType::f32, p_start);
    const Tensor db0 = upload_values(be, {v.cols}, DType::f32, p_start);
    const Tensor t = be.empty(rc, DType::f32);
    be.layer_norm_backward(sum0, gamma, m0, s0, dy, t, dg0, db0);
    be.add_(g0, t);
    const Tensor g1 = upload_values(be, rc, DType::f32, g_start);
    const Tensor dg1 = upload_values(be, {v.cols}, DType::f32, p_start);
    const Tensor db1 = upload_values(be, {v.cols}, DType::f32, p_start);
    be.layer_norm_backward_accumulate(sum0, gamma, m0, s0, dy, g1, dg1, db1, Tensor{});
    EXPECT_EQ(download_bits(be, g1), download_bits(be, g0)) << what << ": dx";
    EXPECT_EQ(download_bits(be, dg1), download_bits(be, dg0)) << what << ": dgamma";
    EXPECT_EQ(download_bits(be, db1), download_bits(be, db0)) << what << ": dbeta";
  }

  // The classifier in place: a vocabulary-wide row (50304, GPT-2's padded vocabulary) and a
  // short one, each logit dtype.
  for (DType d : {DType::f16, DType::bf16, DType::f32}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{16, 50304}, {300, 65}}) {
      const std::string what = "softmax_cross_entropy " + tag(d) + " " + std::to_string(rows) +
                               "x" + std::to_string(cols);
      std::mt19937_64 rng(seed_of(what));
      const Shape rc{rows, cols};
      const std::vector<float> lv = uniform_values(rng, numel_of(rc), -8.0f, 8.0f);
      std::vector<int32_t> labels(static_cast<size_t>(rows));
      for (int32_t& l : labels) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(cols));
      const Tensor lab = upload_i32(be, {rows}, labels);
      const Tensor scale = scalar_f32(be, 4096.0f);
      const Tensor l0 = upload_values(be, rc, d, lv), dl0 = be.empty(rc, d);
      const Tensor loss0 = be.empty({1}, DType::f32), loss1 = be.empty({1}, DType::f32);
      const Tensor c0 = be.empty({1}, DType::i32), c1 = be.empty({1}, DType::i32);
      be.softmax_cross_entropy(l0, lab, loss0, c0, dl0, scale);
      const Tensor l1 = upload_values(be, rc, d, lv);
      be.softmax_cross_entropy(l1, lab, loss1, c1, l1, scale);
      EXPECT_EQ(download_bits(be, loss1), download_bits(be, loss0)) << what << ": loss";
      EXPECT_EQ(download_i32(be, c1), download_i32(be, c0)) << what << ": correct";
      EXPECT_EQ(download_bits(be, l1), download_bits(be, dl0)) << what << ": dlogits";
    }
  }
}

// The GELU epilogues at a GPT-2-like MLP shape: the fused path is the one taken (unless
// AMPCTL_GELU=composed), repeats give the same bits, and fused and composed (Backend's default run
// on the GPU's own ops) agree within the table's bound on every element of pre, y and dpre.
TEST(CudaLinearGelu, FusedRepeatsBitwiseAndMatchesTheComposition) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& be = gpu();
  const char* env = std::getenv("AMPCTL_GELU");
  const bool composed_only = env != nullptr && std::string(env) == "composed";
  const int64_t rows = 2048, c = 192, width = 4 * c;
  std::mt19937_64 rng(14);
  for (DType d : {DType::f16, DType::bf16}) {
    EXPECT_EQ(be.linear_gelu_fused(d, width), !composed_only) << tag(d);
    EXPECT_FALSE(be.linear_gelu_fused(d, width + 4)) << tag(d) << ": AUX_LD % 8";
    EXPECT_FALSE(be.linear_gelu_fused(DType::f32, width));
    const float ws = 2.0f / std::sqrt(static_cast<float>(c));
    const std::vector<float> xv = uniform_values(rng, numel_of({rows, c}), -1.5f, 1.5f);
    const std::vector<float> wv = uniform_values(rng, numel_of({width, c}), -ws, ws);
    const std::vector<float> bv = uniform_values(rng, static_cast<size_t>(width), -0.5f, 0.5f);
    const std::vector<float> dyv = random_values(rng, numel_of({rows, c}), -8, 0);
    const std::vector<float> w2v = uniform_values(rng, numel_of({c, width}), -0.1f, 0.1f);
    Tensor x = upload_values(be, {rows, c}, d, xv), w = upload_values(be, {width, c}, d, wv);
    Tensor b = upload_values(be, {width}, d, bv), dy = upload_values(be, {rows, c}, d, dyv);
    Tensor w2 = upload_values(be, {c, width}, d, w2v);
    auto run = [&](bool fused) {
      Tensor pre = be.empty({rows, width}, d), y = be.empty({rows, width}, d);
      Tensor dpre = be.empty({rows, width}, d), scratch = be.empty({rows, width}, d);
      if (fused) {
        be.fill(scratch, NAN);  // the fused backward leaves it alone; the composition writes it
        be.linear_gelu_forward(x, w, b, pre, y);
        be.linear_gelu_backward_input(dy, w2, pre, dpre, scratch);
        if (!composed_only) {
          const std::vector<uint32_t> sb = download_bits(be, scratch);
          size_t written = 0;
          for (uint32_t bits : sb) written += is_nan_bits(bits, d) ? 0 : 1;
          EXPECT_EQ(written, 0u) << tag(d) << ": the backward composed (scratch written)";
        }
      } else {
        be.Backend::linear_gelu_forward(x, w, b, pre, y);
        be.Backend::linear_gelu_backward_input(dy, w2, pre, dpre, scratch);
      }
      return std::vector<std::vector<uint32_t>>{download_bits(be, pre), download_bits(be, y),
                                                download_bits(be, dpre)};
    };
    const char* names[] = {"pre", "y", "dpre"};
    const auto first = run(true);
    for (int rep = 1; rep < 3; ++rep) {
      const auto again = run(true);
      for (size_t o = 0; o < first.size(); ++o) {
        BitwiseCheck check(d);
        check.add_all(again[o], first[o]);
        EXPECT_TRUE(check.ok()) << tag(d) << " fused " << names[o] << ", repetition " << rep << ": "
                                << check.report();
      }
    }
    const auto composed = run(false);
    const auto composed_again = run(false);
    for (size_t o = 0; o < composed.size(); ++o) {
      BitwiseCheck check(d);
      check.add_all(composed_again[o], composed[o]);
      EXPECT_TRUE(check.ok()) << tag(d) << " composed " << names[o] << ": " << check.report();
    }
    // Fused against composed, both on the GPU, with the table's bounds (pre: the two cuBLASLt
    // algorithms' sums; y and dpre: the composed side's GELU is CUDA's tanhf, as the CPU's).
    Output fused_pre{d, first[0]}, comp_pre{d, composed[0]};
    const std::vector<double> p_c = decoded(comp_pre), pre_f = decoded(fused_pre);
    const double g = gamma_n(static_cast<double>(c + 2), 0x1p-23);
    std::vector<double> d_pre(p_c.size()), d_y(p_c.size()), d_dpre(p_c.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < width; ++o) {
        const size_t k = static_cast<size_t>(r * width + o);
        double ref = round_to(bv[static_cast<size_t>(o)], d), s = 0.0;
        for (int64_t i = 0; i < c; ++i) {
          const double p = static_cast<double>(round_to(xv[static_cast<size_t>(r * c + i)], d)) *
                           round_to(wv[static_cast<size_t>(o * c + i)], d);
          ref += p;
          s += std::fabs(p);
        }
        d_pre[k] = 2.0 * (g * s + kU * (std::fabs(ref) + g * s));
        const double dx = d_pre[k] + ulp(std::fabs(p_c[k]) + d_pre[k], d);
        d_y[k] = (kGeluSlope + 0.5 * kEpilogueTanh) * dx + gelu_side_error(p_c[k], kEpilogueTanh) +
                 gelu_side_error(p_c[k], kTranscendentalUlps * ulp_near(gelu_tanh_t(p_c[k])));
        double a = 0.0, sa = 0.0;
        for (int64_t i = 0; i < c; ++i) {
          const double q = static_cast<double>(round_to(dyv[static_cast<size_t>(r * c + i)], d)) *
                           round_to(w2v[static_cast<size_t>(i * width + o)], d);
          a += q;
          sa += std::fabs(q);
        }
        // Each side's backward read its own forward's pre: gelu' at the fused one's, plus the
        // slope of gelu' times the two pre's difference.
        const double xk = pre_f[k];
        const double d_acc = 2.0 * g * sa + ulp(std::fabs(a) + g * sa, d);
        const double d_grad =
            gelu_grad_side_error(xk, kEpilogueTanh) +
            gelu_grad_side_error(xk, kTranscendentalUlps * ulp_near(gelu_tanh_t(xk))) +
            0.8 * std::fabs(xk - p_c[k]);  // |gelu_tanh''| <= 0.8 (its maximum, at 0: 0.798)
        const double gp = gelu_tanh_grad_exact(xk);
        d_dpre[k] = (std::fabs(gp) + d_grad) * d_acc + (std::fabs(a) + g * sa) * d_grad +
                    2.0 * ulp_near(std::fabs(gp * a) + d_acc + d_grad);
      }
    }
    // The epilogue's GELU reads the float pre-activation, the composition its rounding: over
    // 1.5 M elements some outputs differ unless the forward composed too.
    if (!composed_only) {
      EXPECT_TRUE(first[1] != composed[1]) << tag(d) << ": the forward composed (y bitwise equal)";
    }
    const std::vector<double>* deltas[] = {&d_pre, &d_y, &d_dpre};
    for (size_t o = 0; o < first.size(); ++o) {
      expect_within(Output{d, first[o]}, Output{d, composed[o]}, *deltas[o],
                    tag(d) + " fused vs composed " + names[o]);
    }
  }
}

TEST(CudaNnOps, RejectWrongArguments) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& be = gpu();
  expect_invalid_argument(
      [&] {
        be.linear_forward(be.empty({2, 3}, DType::f16), be.empty({4, 5}, DType::f16), Tensor{},
                          be.empty({2, 4}, DType::f16));
      },
      "linear_forward, in features");
  expect_invalid_argument(
      [&] {
        be.linear_forward(be.empty({2, 3}, DType::f16), be.empty({4, 3}, DType::f16),
                          be.empty({5}, DType::f32), be.empty({2, 4}, DType::f16));
      },
      "linear_forward, bias length");
  expect_invalid_argument(
      [&] {
        be.sum_rows(be.empty({2, 3}, DType::f32), be.empty({2}, DType::f32));
      },
      "sum_rows, out length");
  expect_invalid_argument(
      [&] { be.dropout_forward(be.empty({4}, DType::f32), be.empty({4}, DType::f32), 1.5f, 1, 0); },
      "dropout p > 1");
  expect_invalid_argument(
      [&] {
        be.softmax_cross_entropy(be.empty({2, 3}, DType::f32), be.empty({2}, DType::f32),
                                 be.empty({1}, DType::f32), Tensor{}, Tensor{}, Tensor{});
      },
      "softmax_cross_entropy, f32 labels");
  expect_invalid_argument(
      [&] {
        be.layer_norm_forward(be.empty({2, 3}, DType::f16), be.empty({3}, DType::f16),
                              be.empty({3}, DType::f32), be.empty({2, 3}, DType::f16),
                              be.empty({2}, DType::f32), be.empty({2}, DType::f32), 1e-5f);
      },
      "layer_norm_forward, f16 gamma");
  Tensor host = Tensor::host({4}, DType::f32);
  expect_invalid_argument([&] { be.activation_forward(nn::ActivationKind::relu, host, host); },
                          "activation_forward with host tensors");
  // The transformer ops share the CPU backend's checks (lib/src/backend/checks/).
  expect_invalid_argument(
      [&] {
        be.embedding_forward(be.empty({2, 3}, DType::f32), be.empty({5, 4}, DType::f32),
                             be.empty({3, 4}, DType::f32), be.empty({6, 4}, DType::f32));
      },
      "embedding_forward, f32 tokens");
  expect_invalid_argument(
      [&] {
        be.embedding_backward(be.empty({2, 3}, DType::i32), be.empty({6, 4}, DType::f32),
                              be.empty({5, 4}, DType::f32), be.empty({2, 4}, DType::f32));
      },
      "embedding_backward, wpe shorter than T");
  expect_invalid_argument(
      [&] {
        be.gemm_batched(be.empty({2, 3, 4}, DType::f16), false, be.empty({3, 4, 5}, DType::f16),
                        false, be.empty({2, 3, 5}, DType::f16));
      },
      "gemm_batched, batch counts");
  expect_invalid_argument(
      [&] {
        be.heads_from_rows(be.empty({6, 8}, DType::f16), 4, be.empty({2, 2, 3, 4}, DType::f16));
      },
      "heads_from_rows, columns past the width");
  expect_invalid_argument(
      [&] {
        be.causal_softmax_forward(be.empty({2, 3, 4}, DType::f16), 1.0f, false,
                                  be.empty({2, 3, 4}, DType::f32));
      },
      "causal_softmax_forward, not square");
  Tensor p = be.empty({2, 4, 4}, DType::f32);
  expect_invalid_argument([&] { be.causal_softmax_backward(p, p, 1.0f, false, p); },
                          "causal_softmax_backward, dscores aliasing");
  expect_invalid_argument(
      [&] {
        be.embedding_forward(Tensor::host({1, 1}, DType::i32), be.empty({1, 1}, DType::f32),
                             be.empty({1, 1}, DType::f32), be.empty({1, 1}, DType::f32));
      },
      "embedding_forward with host tokens");
}

}  // namespace
}  // namespace ampctl::test
