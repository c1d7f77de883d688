// The CUDA backend's neural-network ops, Adam and the vectorised memory-bound passes, against the
// CPU reference (label cuda; every test skips, reported as skipped, where no GPU is usable).
//
// A table of cases runs each op on seeded random inputs, across dtypes and odd shapes, on both
// backends and compares every output, element by element:
//   * bitwise where both sides run the same float operations on the same inputs: relu (forward
//     and backward), tanh backward (it reads only the forward output), dropout (the same Philox
//     draw, the same multiply), clip_coef, mse's gradient, the correct count of the
//     cross-entropy, adam_step and sgd_step (adam_math.h / sgd_math.h; the one freedom, Adam's
//     bias corrections through double pow, CUDA's and glibc's, agrees after rounding to float
//     unless within ~2^-50 of a float midpoint, which these inputs do not hit), the vectorised
//     unscale on misaligned views, and linear_forward on integer-valued inputs (every partial sum
//     is exact, so the accumulation order cannot matter and the bias must join the float
//     accumulator before the one rounding, as on the CPU). NaN matches NaN (payloads are the
//     implementation's).
//   * within a bound derived per element otherwise. Each bound is the first-order propagation,
//     through the op's own float formula, of the two sources of difference: (a) reassociation of
//     float sums (each backend's sum of n terms is within gamma_n(u) * sum|terms| of the exact
//     one, Higham section 3.1, u = 2^-24, or 2^-23 for tensor-core products that may truncate),
//     so two of them differ by at most twice that; and (b) transcendentals: CUDA's erff, expf,
//     logf and tanhf are within 2 ulps (CUDA Math API, appendix "Mathematical Functions") and
//     glibc's within 2 ulps on x86-64 (its libm-test-ulps tables), so the two differ by at most
//     kTranscendentalUlps = 4 ulps. Each later float operation on operands that already differ adds
//     one float ulp of its result (two roundings to nearest of nearby values differ by at most the
//     operands' difference plus one ulp). Rounding the float results to an f16/bf16 output adds
//     one ulp of that dtype (round_bound). ulps are evaluated a little above the double reference
//     (ulp_near) so a float value just across a binade boundary is covered.
// On failure each check prints the worst element, both values, the bound and the share of the
// budget it used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/nn_math.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

// One backend of each kind for the whole binary: a cuBLAS handle costs more than most tests.
Backend& gpu() {
  static std::unique_ptr<Backend> backend = make_cuda_backend(0);
  return *backend;
}

Backend& cpu() {
  static std::unique_ptr<Backend> backend = cpu_backend();
  return *backend;
}

uint64_t seed_of(const std::string& name) {  // FNV-1a: a stable seed per case name
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// ---- error analysis ----

constexpr double kU = 0x1p-24;  // float unit roundoff
constexpr double kTranscendentalUlps = 4;
const double kInf = std::numeric_limits<double>::infinity();

double gamma_n(double n, double u) {
  return n * u / (1.0 - n * u);
}

// The spacing of dtype d's values at magnitude |v| (subnormal spacing below the normal range).
double ulp(double v, DType d = DType::f32) {
  const int precision = d == DType::f16 ? 11 : d == DType::bf16 ? 8 : 24;
  const int min_exponent = d == DType::f16 ? -14 : -126;
  const double a = std::fabs(v);
  const int e = a > 0 ? std::max(std::ilogb(a), min_exponent) : min_exponent;
  return std::ldexp(1.0, e - (precision - 1));
}

// The ulp of a float value of which v is a double-precision estimate (within a few float ulps):
// evaluated slightly above |v|, so a float just across the next power of two is covered.
double ulp_near(double v) {
  return ulp(std::fabs(v) * (1.0 + 0x1p-16));
}

// Two float values at most `delta` apart, each rounded to nearest in d, differ by at most delta
// plus one ulp of d at their magnitude (want is the CPU's rounded output, within half an ulp of
// its float value).
double round_bound(double want, double delta, DType d) {
  return delta + ulp(std::fabs(want) + ulp(want, d) + delta, d);
}

// ---- inputs ----

struct HostInput {
  Shape shape;
  DType dtype;
  std::vector<uint32_t> bits;
  // The exact values (f16/bf16 widened; i32 as integers).
  std::vector<double> values() const {
    std::vector<double> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      v[i] = dtype == DType::i32 ? static_cast<double>(static_cast<int32_t>(bits[i]))
                                 : static_cast<double>(decode(bits[i], dtype));
    }
    return v;
  }
};

HostInput from_values(const Shape& shape, DType d, const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = encode(v[i], d);
  return {shape, d, bits};
}

HostInput from_i32(const Shape& shape, const std::vector<int32_t>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = static_cast<uint32_t>(v[i]);
  return {shape, DType::i32, bits};
}

HostInput scalar_input(float v) {
  return from_values({1}, DType::f32, {v});
}

size_t numel_of(const Shape& s) {
  return static_cast<size_t>(shape_numel(s));
}

// Random values over binades [emin, emax], a `special` share replaced by +-inf or NaN.
std::vector<float> random_with_specials(std::mt19937_64& rng, size_t n, int emin, int emax,
                                        double special) {
  std::vector<float> v = random_values(rng, n, emin, emax);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {INFINITY, -INFINITY, NAN};
  for (float& x : v) {
    if (u(rng) < special) x = specials[rng() % 3];
  }
  return v;
}

// Uniform in [lo, hi).
std::vector<float> uniform_values(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> small_integers(std::mt19937_64& rng, size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// ---- the table ----

// How one output is compared: bitwise, or |cuda - cpu| <= delta[i] in float before the output's
// own rounding (round_bound adds that for f16/bf16 outputs).
struct Spec {
  bool bitwise = true;
  std::vector<double> delta;
};

Spec bitwise() {
  return {};
}
Spec within(std::vector<double> delta) {
  return {false, std::move(delta)};
}

struct Output {
  DType dtype;
  std::vector<uint32_t> bits;
};

struct NnCase {
  std::string name;
  std::function<std::vector<HostInput>(std::mt19937_64&)> make_inputs;
  // Runs the op on `be` over freshly uploaded inputs; returns the tensors to compare.
  std::function<std::vector<Tensor>(Backend& be, std::vector<Tensor>& in)> run;
  // One Spec per output, from the inputs (and the CPU's outputs, decoded, where the bound needs
  // them). Unset: every output bitwise.
  std::function<std::vector<Spec>(const std::vector<HostInput>& in,
                                  const std::vector<std::vector<double>>& want)>
      specs;
};

void PrintTo(const NnCase& c, std::ostream* os) {
  *os << c.name;
}

std::string tag(DType d) {
  return dtype_name(d);
}

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

void add_linear_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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

void add_sum_rows_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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

const char* kind_name(nn::ActivationKind k) {
  return k == nn::ActivationKind::relu ? "relu" : k == nn::ActivationKind::gelu ? "gelu" : "tanh";
}

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) with erff's result differing: first order through the
// product, one ulp per later operation.
double gelu_delta(double x) {
  const double e = std::erf(x * 0.70710678118654752440);
  const double s = 1.0 + e;
  return std::fabs(0.5 * x) * (kTranscendentalUlps * ulp_near(e) + ulp_near(s)) +
         ulp_near(0.5 * x * s);
}

// gelu'(x) dy = dy (cdf + x pdf): cdf = 0.5 (1 + erf), pdf = exp(-x^2 / 2) / sqrt(2 pi).
double gelu_grad_delta(double x, double dy) {
  const double e = std::erf(x * 0.70710678118654752440);
  const double cdf = 0.5 * (1.0 + e);
  const double ex = std::exp(-0.5 * x * x);
  const double pdf = ex * 0.39894228040143267794;
  const double d_cdf =
      0.5 * (kTranscendentalUlps * ulp_near(e) + ulp_near(1.0 + e)) + ulp_near(cdf);
  const double d_pdf = 0.39894228040143267794 * kTranscendentalUlps * ulp_near(ex) + ulp_near(pdf);
  const double d_xpdf = std::fabs(x) * d_pdf + ulp_near(x * pdf);
  const double d_g = d_cdf + d_xpdf + ulp_near(cdf + x * pdf);
  return std::fabs(dy) * d_g + ulp_near(dy * (cdf + x * pdf));
}

void add_activation_cases(std::vector<NnCase>& cases) {
  const std::vector<std::pair<DType, DType>> type_pairs = {{DType::f32, DType::f32},
                                                           {DType::f16, DType::f16},
                                                           {DType::bf16, DType::bf16},
                                                           {DType::f32, DType::f16},
                                                           {DType::bf16, DType::f32}};
  constexpr int64_t n = 10007;
  for (nn::ActivationKind kind :
       {nn::ActivationKind::relu, nn::ActivationKind::gelu, nn::ActivationKind::tanh}) {
    const bool transcendental = kind != nn::ActivationKind::relu;
    for (const auto& [in_type, out_type] : type_pairs) {
      NnCase f;
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
            delta[i] = kind == nn::ActivationKind::gelu
                           ? gelu_delta(x[i])
                           : kTranscendentalUlps * ulp_near(std::tanh(x[i]));
          }
          return std::vector<Spec>{within(delta)};
        };
      }
      cases.push_back(f);

      NnCase b;
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
      if (kind == nn::ActivationKind::gelu) {  // tanh's and relu's read only y: bitwise
        b.specs = [](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
          const std::vector<double> x = in[0].values(), dy = in[2].values();
          std::vector<double> delta(x.size());
          for (size_t i = 0; i < x.size(); ++i) delta[i] = gelu_grad_delta(x[i], dy[i]);
          return std::vector<Spec>{within(delta)};
        };
      }
      cases.push_back(b);
    }
    // In place: dx overwrites dy (and y overwrites x in the forward pass).
    NnCase inplace;
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

void add_dropout_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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

void add_xent_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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
  }
}

void add_mse_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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

void add_layer_norm_cases(std::vector<NnCase>& cases) {
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
    NnCase c;
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
      const std::vector<double> x = in[0].values(), gamma = in[1].values(), beta = in[2].values();
      const auto cols = static_cast<size_t>(v.cols);
      std::vector<double> dy(x.size()), dmean(static_cast<size_t>(v.rows)), drstd(dmean.size());
      for (size_t r = 0; r < static_cast<size_t>(v.rows); ++r) {
        const RowStats s = row_stats(x.data() + r * cols, v.cols, kEps);
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
    };
    cases.push_back(c);
  }

  struct BackwardVariant {
    DType x, dy, dx;
    int64_t rows, cols;
    bool want_dx, want_params;
  };
  // 1100 rows: several 512-row chunks for the parameter gradients.
  const BackwardVariant backward[] = {
      {DType::f32, DType::f32, DType::f32, 37, 45, true, true},
      {DType::f16, DType::f16, DType::f16, 1100, 37, true, true},
      {DType::bf16, DType::bf16, DType::bf16, 3, 1000, true, true},
      {DType::f16, DType::f32, DType::f16, 64, 257, true, false},
      {DType::f32, DType::f16, DType::f32, 600, 20, false, true},
  };
  for (const BackwardVariant& v : backward) {
    NnCase c;
    c.name = "layer_norm_backward_" + tag(v.x) + "_dy" + tag(v.dy) + "_dx" + tag(v.dx) + "_" +
             std::to_string(v.rows) + "x" + std::to_string(v.cols) + (v.want_dx ? "" : "_no_dx") +
             (v.want_params ? "" : "_no_param_grads");
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
          from_values({v.cols}, DType::f32,
                      random_values(rng, static_cast<size_t>(v.cols), -4, 0))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
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
                                db0 = in[6].values();
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

void add_clip_cases(std::vector<NnCase>& cases) {
  for (float max_norm : {1.0f, 0.3f, 1e-3f}) {
    NnCase c;
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

// ---- the optimizers and the unscale pass on aligned and misaligned buffers ----

struct AdamVariant {
  const char* name;
  optim::AdamHyper hyper;
  bool inv_scale;
  DType lowp;     // i32: no lowp copy (f32: a plain copy in the same pass)
  size_t offset;  // elements: views this far into their buffers (offset % 4 != 0: scalar path)
};

void add_adam_cases(std::vector<NnCase>& cases) {
  const AdamVariant variants[] = {
      {"adam", {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false}, false, DType::i32, 0},
      {"adamw_lowp_f32", {1e-3, 0.9, 0.999, 1e-8, 0.01, true, false}, true, DType::f32, 0},
      {"adam_lowp_f32_misaligned",
       {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false},
       true,
       DType::f32,
       3},
      {"adam_wd_amp_f16", {3e-3, 0.9, 0.99, 1e-6, 0.1, false, false}, true, DType::f16, 0},
      {"adamw_bf16", {1e-2, 0.8, 0.999, 1e-8, 0.01, true, false}, true, DType::bf16, 0},
      {"adam_maximize_misaligned", {1e-3, 0.9, 0.999, 1e-8, 0.0, false, true}, true, DType::f16, 1},
      {"adamw_misaligned_lowp", {2e-3, 0.95, 0.98, 1e-7, 0.05, true, false}, false, DType::bf16, 2},
  };
  constexpr int64_t n = 10007;  // odd: the vectorised pass has a scalar tail
  constexpr int kSteps = 4;
  for (const AdamVariant& v : variants) {
    NnCase c;
    c.name = std::string("adam_step_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      const auto m = static_cast<int64_t>(n + v.offset);
      std::vector<float> v_sq = random_values(rng, static_cast<size_t>(m), -20, -4);
      for (float& e : v_sq) e = std::fabs(e);
      return std::vector<HostInput>{
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
          from_values({kSteps * n}, DType::f32, random_values(rng, kSteps * n, -18, -2)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -12, -4)),
          from_values({m}, DType::f32, v_sq), from_i32({1}, {5}),
          // Step 3 of 4 overflowed: it must be skipped (nothing written, step not counted).
          from_values({kSteps}, DType::f32, {0.0f, 0.0f, 1.0f, 0.0f}), scalar_input(0x1p-10f),
          from_values({m}, v.lowp == DType::i32 ? DType::f16 : v.lowp,
                      random_values(rng, static_cast<size_t>(m), -4, 1))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      for (int s = 0; s < kSteps; ++s) {
        OptimizerStepArgs args;
        args.params = in[0].view(v.offset, {n});
        args.grads = in[1].view(static_cast<size_t>(s * n), {n});
        args.exp_avg = in[2].view(v.offset, {n});
        args.exp_avg_sq = in[3].view(v.offset, {n});
        args.step = in[4];
        args.found_inf = in[5].view(static_cast<size_t>(s), {1});
        if (v.inv_scale) args.inv_scale = in[6];
        if (v.lowp != DType::i32) args.lowp_params = in[7].view(v.offset, {n});
        args.hyper = v.hyper;
        be.optimizer_step(args);
      }
      return std::vector<Tensor>{in[0], in[2], in[3], in[4], in[7]};
    };
    cases.push_back(c);
  }
}

void add_sgd_alignment_cases(std::vector<NnCase>& cases) {
  constexpr int64_t n = 4099;
  for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
    NnCase c;
    c.name = "sgd_step_offset" + std::to_string(offset);
    c.make_inputs = [offset](std::mt19937_64& rng) {
      const auto m = static_cast<int64_t>(n + offset);
      return std::vector<HostInput>{
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -14, -2)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -10, -2)),
          from_i32({1}, {3}),
          scalar_input(0x1p-8f),
          from_values({m}, DType::f16, random_values(rng, static_cast<size_t>(m), -4, 1))};
    };
    c.run = [offset](Backend& be, std::vector<Tensor>& in) {
      OptimizerStepArgs args;
      args.params = in[0].view(offset, {n});
      args.grads = in[1].view(offset, {n});
      args.momentum_buf = in[2].view(offset, {n});
      args.step = in[3];
      args.inv_scale = in[4];
      args.lowp_params = in[5].view(offset, {n});
      args.hyper = optim::SgdHyper{0.05f, 0.9f, 0.0f, 1e-4f, true, false};
      be.optimizer_step(args);
      return std::vector<Tensor>{in[0], in[2], in[3], in[5]};
    };
    cases.push_back(c);
  }
}

// optimizer.decay_on: matrices: a decay mask (runs of 0 and 1, odd lengths, so vectorised
// groups mix both) on AdamW, Adam's L2 and SGD, aligned and not.
void add_decay_mask_cases(std::vector<NnCase>& cases) {
  constexpr int64_t n = 4099;
  for (int kind = 0; kind < 3; ++kind) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      NnCase c;
      c.name = std::string("decay_mask_") +
               (kind == 0   ? "adamw"
                : kind == 1 ? "adam"
                            : "sgd") +
               "_offset" + std::to_string(offset);
      c.make_inputs = [offset](std::mt19937_64& rng) {
        const auto m = static_cast<int64_t>(n + offset);
        std::vector<float> v_sq = random_values(rng, static_cast<size_t>(m), -20, -4);
        for (float& e : v_sq) e = std::fabs(e);
        std::vector<float> mask(static_cast<size_t>(m));
        for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i / 7) % 3 == 0 ? 0.0f : 1.0f;
        return std::vector<HostInput>{
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -14, -2)),
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -12, -4)),
            from_values({m}, DType::f32, v_sq),
            from_i32({1}, {2}),
            from_values({m}, DType::f32, mask),
            from_values({m}, DType::f16, random_values(rng, static_cast<size_t>(m), -4, 1))};
      };
      c.run = [kind, offset](Backend& be, std::vector<Tensor>& in) {
        for (int s = 0; s < 2; ++s) {
          OptimizerStepArgs args;
          args.params = in[0].view(offset, {n});
          args.grads = in[1].view(offset, {n});
          args.step = in[4];
          args.decay_mask = in[5].view(offset, {n});
          args.lowp_params = in[6].view(offset, {n});
          if (kind == 2) {
            args.momentum_buf = in[2].view(offset, {n});
            args.hyper = optim::SgdHyper{0.05f, 0.9f, 0.0f, 0.1f, false, false};
          } else {
            args.exp_avg = in[2].view(offset, {n});
            args.exp_avg_sq = in[3].view(offset, {n});
            args.hyper = optim::AdamHyper{1e-2, 0.9, 0.99, 1e-8, 0.1, kind == 0, false};
          }
          be.optimizer_step(args);
        }
        return std::vector<Tensor>{in[0], in[2], in[3], in[4], in[6]};
      };
      cases.push_back(c);
    }
  }
}

// Unscale over views that start 0..7 elements past a 16-byte boundary and end anywhere: the
// vectorised pass's scalar head and tail, and a body of 16-byte words.
void add_unscale_alignment_cases(std::vector<NnCase>& cases) {
  for (float inv : {0x1p-12f, 1.0f / 3.0f, 1.0f}) {
    for (DType d : kFloatDTypes) {
      NnCase c;
      c.name = "unscale_views_" + tag(d) +
               (inv == 1.0f       ? "_check_only"
                : inv == 0x1p-12f ? "_pow2"
                                  : "_inexact");
      c.make_inputs = [d, inv](std::mt19937_64& rng) {
        // Few specials: most views must be clean so found_inf's per-view values are tested.
        return std::vector<HostInput>{
            from_values({8 * 1000}, d, random_with_specials(rng, 8 * 1000, -14, 14, 0.0)),
            from_values({7}, d, {1.0f, 2.0f, NAN, 3.0f, INFINITY, 5.0f, 6.0f}), scalar_input(inv)};
      };
      c.run = [](Backend& be, std::vector<Tensor>& in) {
        Tensor found = be.zeros({9}, DType::f32);
        const size_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 999};
        size_t start = 0;
        for (size_t k = 0; k < 8; ++k) {
          const Tensor view = in[0].view(start + k, {static_cast<int64_t>(sizes[k])});
          be.non_finite_check_and_unscale_(std::span<const Tensor>(&view, 1), found.view(k, {1}),
                                           in[2]);
          start += 1000;
        }
        // A non-finite element inside a misaligned view among clean ones.
        const Tensor views[] = {in[0].view(7001, {998}), in[1].view(1, {5})};
        be.non_finite_check_and_unscale_(views, found.view(8, {1}), in[2]);
        return std::vector<Tensor>{in[0], in[1], found};
      };
      cases.push_back(c);
    }
  }
}

std::vector<NnCase> all_cases() {
  std::vector<NnCase> cases;
  add_linear_cases(cases);
  add_sum_rows_cases(cases);
  add_activation_cases(cases);
  add_dropout_cases(cases);
  add_xent_cases(cases);
  add_mse_cases(cases);
  add_layer_norm_cases(cases);
  add_clip_cases(cases);
  add_adam_cases(cases);
  add_sgd_alignment_cases(cases);
  add_decay_mask_cases(cases);
  add_unscale_alignment_cases(cases);
  return cases;
}

// ---- running and comparing ----

std::vector<Output> run_case(Backend& be, const NnCase& c, const std::vector<HostInput>& inputs) {
  std::vector<Tensor> in;
  for (const HostInput& h : inputs) in.push_back(upload_bits(be, h.shape, h.dtype, h.bits));
  std::vector<Output> out;
  for (const Tensor& t : c.run(be, in)) out.push_back({t.dtype(), download_bits(be, t)});
  return out;
}

std::vector<double> decoded(const Output& o) {
  std::vector<double> v(o.bits.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = o.dtype == DType::i32 ? static_cast<double>(static_cast<int32_t>(o.bits[i]))
                                 : static_cast<double>(decode(o.bits[i], o.dtype));
  }
  return v;
}

void expect_bitwise(const Output& got, const Output& want, const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.bits.size()) << what;
  if (got.dtype == DType::i32) {
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < got.bits.size(); ++i) {
      if (got.bits[i] != want.bits[i] && mismatches++ == 0) first = i;
    }
    EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.bits.size()
                              << " i32 elements differ (budget: 0); first at " << first << ": cuda "
                              << static_cast<int32_t>(got.bits[first]) << ", cpu "
                              << static_cast<int32_t>(want.bits[first]);
    return;
  }
  BitwiseCheck check(got.dtype, /*nan_any=*/true);
  check.add_all(got.bits, want.bits);
  EXPECT_TRUE(check.ok()) << what << " (got = cuda, expected = cpu): " << check.report();
}

void expect_within(const Output& got, const Output& want, const std::vector<double>& delta,
                   const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.bits.size()) << what;
  ASSERT_EQ(delta.size(), want.bits.size()) << what << ": one bound per element";
  const std::vector<double> g = decoded(got), w = decoded(want);
  ErrorBudget budget;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound =
        want.dtype == DType::f32 ? delta[i] : round_bound(w[i], delta[i], want.dtype);
    budget.add(i, g[i], w[i], bound);
  }
  EXPECT_TRUE(budget.ok()) << what << " (got = cuda, expected = cpu): " << budget.report();
}

class CudaNnVsCpu : public ::testing::TestWithParam<NnCase> {};

TEST_P(CudaNnVsCpu, MatchesCpuReference) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const NnCase& c = GetParam();
  std::mt19937_64 rng(seed_of(c.name));
  const std::vector<HostInput> inputs = c.make_inputs(rng);
  const std::vector<Output> want = run_case(cpu(), c, inputs);
  const std::vector<Output> got = run_case(gpu(), c, inputs);
  ASSERT_EQ(got.size(), want.size());
  std::vector<std::vector<double>> want_values;
  for (const Output& o : want) want_values.push_back(decoded(o));
  std::vector<Spec> specs = c.specs ? c.specs(inputs, want_values) : std::vector<Spec>{};
  specs.resize(got.size());  // unlisted outputs: bitwise
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string what = c.name + ", output " + std::to_string(i);
    ASSERT_EQ(got[i].dtype, want[i].dtype) << what;
    if (specs[i].bitwise) {
      expect_bitwise(got[i], want[i], what);
    } else {
      expect_within(got[i], want[i], specs[i].delta, what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaNnVsCpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<NnCase>& info) {
                           return info.param.name;
                         });

// ---- properties of the GPU alone ----

// A step with found_inf set writes nothing: params, both moments, the lowp copy and step keep
// every bit, NaN payloads included.
TEST(CudaAdamStep, SkippedStepLeavesStateBitwiseUnchanged) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  std::mt19937_64 rng(11);
  const int64_t n = 4099;
  for (DType lowp : {DType::f16, DType::bf16}) {
    std::vector<uint32_t> param_bits(n), m_bits(n), v_bits(n), lowp_bits(n);
    for (auto& b : param_bits) b = static_cast<uint32_t>(rng());  // any bits, NaNs included
    for (auto& b : m_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : v_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : lowp_bits) b = static_cast<uint32_t>(rng()) & 0xffffu;
    OptimizerStepArgs args;
    args.params = upload_bits(gpu(), {n}, DType::f32, param_bits);
    args.grads = upload_values(gpu(), {n}, DType::f32, random_values(rng, n, -4, 4));
    args.exp_avg = upload_bits(gpu(), {n}, DType::f32, m_bits);
    args.exp_avg_sq = upload_bits(gpu(), {n}, DType::f32, v_bits);
    args.step = scalar_i32(gpu(), 7);
    args.found_inf = scalar_f32(gpu(), 1.0f);
    args.inv_scale = scalar_f32(gpu(), 0x1p-8f);
    args.lowp_params = upload_bits(gpu(), {n}, lowp, lowp_bits);
    args.hyper = optim::AdamHyper{1e-3, 0.9, 0.999, 1e-8, 0.01, true, false};
    gpu().optimizer_step(args);
    BitwiseCheck params(DType::f32), m(DType::f32), v(DType::f32), low(lowp);
    params.add_all(download_bits(gpu(), args.params), param_bits);
    m.add_all(download_bits(gpu(), args.exp_avg), m_bits);
    v.add_all(download_bits(gpu(), args.exp_avg_sq), v_bits);
    low.add_all(download_bits(gpu(), args.lowp_params), lowp_bits);
    EXPECT_TRUE(params.ok()) << "params: " << params.report();
    EXPECT_TRUE(m.ok()) << "exp_avg: " << m.report();
    EXPECT_TRUE(v.ok()) << "exp_avg_sq: " << v.report();
    EXPECT_TRUE(low.ok()) << tag(lowp) << " lowp_params: " << low.report();
    EXPECT_EQ(gpu().read_scalar_i32(args.step), 7);
  }
}

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
}

}  // namespace
}  // namespace ampctl::test
