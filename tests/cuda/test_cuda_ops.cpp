// The CUDA backend against the CPU reference, op by op (label cuda).
//
// A table of cases runs every op on seeded random inputs (with inf and NaN where the op must see
// them) on both backends and compares what each returns:
//   * bitwise for cast, fill, mul_scalar_tensor, add_, non_finite_check_and_unscale_ (and its
//     per-segment flags), inv_scale,
//     update_scale_ and sgd_step: both sides run the same per-element code (half.h, amp_math.h,
//     sgd_math.h) with contraction off (nvcc --fmad=false, g++ -ffp-contract=off) and IEEE
//     round-to-nearest-even, so any differing bit is a bug. The one freedom: a NaN produced by
//     arithmetic or a conversion may carry any payload (IEEE 754 leaves it to the
//     implementation; the GPU returns the canonical NaN), so NaN matches NaN there.
//   * global_norm within 1e-6 relative: both accumulate in double, in different orders (the GPU
//     by a fixed tree), which moves the double sum by about 1e-16 relative; after the final
//     rounding to float the two are at most one float ulp (2^-23 relative) apart.
//   * gemm against a double-precision reference, with the bound derived at GemmBound below.
// Every test skips (reported as skipped) where no GPU is usable.
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
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

#define AMPCTL_REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU"

// One CUDA backend for the whole binary: creating a cuBLAS handle costs more than most tests.
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

// ---- inputs ----

// A host-side input as storage bits (i32 values as their two's-complement bits).
struct HostInput {
  Shape shape;
  DType dtype;
  std::vector<uint32_t> bits;
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

// Random values over binades [emin, emax]; a `special` share of them replaced by +inf, -inf or
// NaN.
std::vector<float> random_with_specials(std::mt19937_64& rng, size_t n, int emin, int emax,
                                        double special) {
  std::vector<float> v = random_values(rng, n, emin, emax);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (float& x : v) {
    if (u(rng) < special) x = specials[rng() % 3];
  }
  return v;
}

// ---- the table ----

enum class Metric { bitwise, relative_1e6 };

struct OpCase {
  std::string name;
  std::function<std::vector<HostInput>(std::mt19937_64&)> make_inputs;
  // Runs the op on `be` over freshly uploaded inputs; returns the tensors to compare.
  std::function<std::vector<Tensor>(Backend& be, std::vector<Tensor>& in)> run;
  Metric metric = Metric::bitwise;
};

void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.name;
}

void add_cast_cases(std::vector<OpCase>& cases) {
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::i32};
  for (DType src : all) {
    for (DType dst : all) {
      OpCase c;
      c.name = std::string("cast_") + dtype_name(src) + "_to_" + dtype_name(dst);
      c.make_inputs = [src, dst](std::mt19937_64& rng) {
        std::vector<uint32_t> bits;
        if (src == DType::f16 || src == DType::bf16) {
          // Every 16-bit pattern: all the finite values, both infinities, every NaN.
          for (uint32_t b = 0; b < 65536; ++b) bits.push_back(b);
          if (dst == DType::i32) {  // float -> i32 is defined inside i32's range only
            std::vector<uint32_t> in_range;
            for (uint32_t b : bits) {
              const float v = decode(b, src);
              if (v > -2147483904.0f && v < 2147483648.0f) in_range.push_back(b);
            }
            bits = in_range;
          }
        } else if (src == DType::f32 && dst != DType::i32) {
          // Random patterns hit every class (subnormals, NaN payloads, values that overflow a
          // 16-bit format); the fixed ones are the rounding boundaries of f16 and bf16.
          for (int i = 0; i < 1 << 16; ++i) bits.push_back(static_cast<uint32_t>(rng()));
          for (float v :
               {65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.002p0f,
                0x1.006p0f, 0x1.01p0f, 0x1.03p0f, 3.3895314e38f, 3.4028235e38f, 0.0f, -0.0f}) {
            bits.push_back(float_bits(v));
            bits.push_back(float_bits(-v));
          }
        } else if (src == DType::f32) {  // to i32: finite values inside i32's range
          for (float v : random_values(rng, 1 << 16, -10, 30)) bits.push_back(float_bits(v));
          for (float v : {2147483520.0f, -2147483648.0f, 0.5f, -0.5f, 0.0f, -0.0f}) {
            bits.push_back(float_bits(v));
          }
        } else {  // i32: every magnitude, so i32 -> float rounds at many exponents
          for (int i = 0; i < 1 << 16; ++i) {
            const int shift = static_cast<int>(rng() % 32);
            bits.push_back(static_cast<uint32_t>(static_cast<int32_t>(rng()) >> shift));
          }
          for (int32_t v : {INT32_MAX, INT32_MIN, 16777217, -16777217, 2049, 0}) {
            bits.push_back(static_cast<uint32_t>(v));
          }
        }
        return std::vector<HostInput>{{{static_cast<int64_t>(bits.size())}, src, bits}};
      };
      c.run = [dst](Backend& be, std::vector<Tensor>& in) {
        Tensor out = be.empty(in[0].shape(), dst);
        be.cast(in[0], out);
        return std::vector<Tensor>{out};
      };
      cases.push_back(c);
    }
  }
}

void add_fill_cases(std::vector<OpCase>& cases) {
  // Values around the formats' edges; 1 + 2^-11 + 2^-40 is a double that rounds to f16
  // differently through float (to 1, a tie) than directly (to 1 + 2^-10): both backends go
  // through float, as PyTorch's fill_ does.
  const std::vector<double> float_values = {0.0,
                                            -0.0,
                                            1.0,
                                            1.0 / 3.0,
                                            65504.0,
                                            65519.99,
                                            65520.0,
                                            1e-8,
                                            -3.5e38,
                                            1e39,
                                            5.96e-8,
                                            1.0 + 0x1p-11 + 0x1p-40,
                                            std::numeric_limits<double>::infinity(),
                                            std::numeric_limits<double>::quiet_NaN()};
  const std::vector<double> int_values = {0.0, 1.0, -7.0, 2147483647.0, -2147483647.0, 123456789.0};
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    const std::vector<double>& values = d == DType::i32 ? int_values : float_values;
    OpCase c;
    c.name = std::string("fill_") + dtype_name(d);
    c.make_inputs = [](std::mt19937_64&) { return std::vector<HostInput>{}; };
    c.run = [d, values](Backend& be, std::vector<Tensor>&) {
      std::vector<Tensor> out;
      for (double v : values) {
        Tensor t = be.empty({1003}, d);
        be.fill(t, v);
        out.push_back(t);
      }
      return out;
    };
    cases.push_back(c);
  }
}

void add_elementwise_cases(std::vector<OpCase>& cases) {
  constexpr size_t n = 10007;
  for (DType x_type : kFloatDTypes) {
    for (DType out_type : kFloatDTypes) {
      // A power of two (exact but for overflow and subnormals) and a scale that rounds.
      for (float scale : {65536.0f, 0.3f}) {
        OpCase c;
        c.name = std::string("mul_scalar_tensor_") + dtype_name(x_type) + "_to_" +
                 dtype_name(out_type) + (scale == 65536.0f ? "_pow2" : "_inexact");
        c.make_inputs = [x_type, scale](std::mt19937_64& rng) {
          return std::vector<HostInput>{
              from_values({n}, x_type, random_with_specials(rng, n, -20, 12, 0.01)),
              scalar_input(scale)};
        };
        c.run = [out_type](Backend& be, std::vector<Tensor>& in) {
          Tensor out = be.empty(in[0].shape(), out_type);
          be.mul_scalar_tensor(in[0], in[1], out);
          return std::vector<Tensor>{out};
        };
        cases.push_back(c);
      }
      for (float alpha : {1.0f, -0.37f}) {
        OpCase c;
        c.name = std::string("add_") + dtype_name(x_type) + "_plus_" + dtype_name(out_type) +
                 (alpha == 1.0f ? "_alpha1" : "_alpha_inexact");
        const DType dst_type = x_type, src_type = out_type;
        c.make_inputs = [dst_type, src_type](std::mt19937_64& rng) {
          return std::vector<HostInput>{
              from_values({n}, dst_type, random_with_specials(rng, n, -12, 12, 0.01)),
              from_values({n}, src_type, random_with_specials(rng, n, -12, 12, 0.01))};
        };
        c.run = [alpha](Backend& be, std::vector<Tensor>& in) {
          be.add_(in[0], in[1], alpha);
          return std::vector<Tensor>{in[0]};
        };
        cases.push_back(c);
      }
    }
    OpCase c;  // out aliases x
    c.name = std::string("mul_scalar_tensor_in_place_") + dtype_name(x_type);
    c.make_inputs = [x_type](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({n}, x_type, random_with_specials(rng, n, -20, 12, 0.01)),
          scalar_input(0x1p-16f)};
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.mul_scalar_tensor(in[0], in[1], in[0]);
      return std::vector<Tensor>{in[0]};
    };
    cases.push_back(c);
  }
}

// Tensors of the given sizes, dtypes cycling through f32, f16, bf16.
std::vector<HostInput> mixed_tensors(std::mt19937_64& rng, const std::vector<int64_t>& sizes,
                                     int emin, int emax, double special) {
  std::vector<HostInput> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const DType d = kFloatDTypes[i % 3];
    out.push_back(
        from_values({sizes[i]}, d,
                    random_with_specials(rng, static_cast<size_t>(sizes[i]), emin, emax, special)));
  }
  return out;
}

std::vector<int64_t> many_sizes(std::mt19937_64& rng, size_t count) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < count; ++i) sizes.push_back(static_cast<int64_t>(rng() % 100));
  return sizes;
}

void add_global_norm_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    std::function<std::vector<HostInput>(std::mt19937_64&)> make;
  };
  const std::vector<Variant> variants = {
      {"mixed",
       [](std::mt19937_64& rng) {
         return mixed_tensors(rng, {100003, 5000, 777, 0, 1}, -10, 10, 0.0);
       }},
      // More tensors than one kernel launch takes: the partial sums carry across launches.
      {"many",
       [](std::mt19937_64& rng) { return mixed_tensors(rng, many_sizes(rng, 300), -6, 6, 0.0); }},
      {"empty_list", [](std::mt19937_64&) { return std::vector<HostInput>{}; }},
      {"with_inf_nan",
       [](std::mt19937_64& rng) {
         return mixed_tensors(rng, {4096, 4096}, -4, 4, 0.001);
       }},
  };
  for (const Variant& v : variants) {
    OpCase c;
    c.name = std::string("global_norm_") + v.name;
    c.make_inputs = v.make;
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.empty({1}, DType::f32);
      be.global_norm(in, out);
      return std::vector<Tensor>{out};
    };
    c.metric = Metric::relative_1e6;
    cases.push_back(c);
  }
}

void add_unscale_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    float found_inf0;
    double special;
    bool many;
  };
  const Variant variants[] = {
      {"clean_pow2", 0x1p-16f, 0.0f, 0.0, false},
      {"clean_inexact", 1.0f / 3.0f, 0.0f, 0.0, false},
      {"with_inf_nan", 0x1p-16f, 0.0f, 0.002, false},
      {"check_only_with_inf_nan", 1.0f, 0.0f, 0.002, false},
      {"clean_keeps_found", 0.5f, 1.0f, 0.0, false},
      {"many_tensors", 0x1p-10f, 0.0f, 0.0, true},
  };
  for (const Variant& v : variants) {
    OpCase c;
    c.name = std::string("non_finite_check_and_unscale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::vector<HostInput> in;
      if (v.many) {
        // 200 tensors span three launches; one NaN in the last one must still be found.
        in = mixed_tensors(rng, many_sizes(rng, 200), -8, 8, 0.0);
        in.push_back(from_values({5}, DType::f16, {1.0f, 2.0f, NAN, 3.0f, 4.0f}));
      } else {
        in = mixed_tensors(rng, {20011, 4096, 3000, 1}, -14, 14, v.special);
      }
      in.push_back(scalar_input(v.found_inf0));
      in.push_back(scalar_input(v.inv_scale));
      return in;
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      const size_t n = in.size() - 2;
      be.non_finite_check_and_unscale_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1]);
      return std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
    };
    cases.push_back(c);
  }
}

// Attribution: the same pass with segment_starts / segment_found. Outputs: the tensors,
// found_inf and the per-segment flags (i32, bitwise). Segments cut across tensor boundaries and
// through the middle of 16-byte words, and the many-tensor case spans three launches, so the
// global element numbering (pack bases) is exercised; non-finite values sit in a few segments
// only, so a wrong lookup flags a wrong segment.
void add_unscale_segment_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    int kind;  // 0: mixed tensors, 1: one flat f32 arena cut like a model layout, 2: many tensors
  };
  const Variant variants[] = {
      {"segments_mixed", 0x1p-16f, 0},
      {"segments_mixed_check_only", 1.0f, 0},
      {"segments_flat_arena", 1.0f / 3.0f, 1},
      {"segments_flat_arena_check_only", 1.0f, 1},
      {"segments_many_tensors", 0x1p-10f, 2},
      // A scale below 1: finite values overflow when unscaled (f16 and bf16 here, f32 rarely), and
      // only the originally non-finite ones may be flagged (the separate marking launch).
      {"segments_inv_above_one_overflowing", 0x1p20f, 0},
      {"segments_inv_above_one_many_tensors", 3.0f, 2},
  };
  for (const Variant& v : variants) {
    OpCase c;
    c.name = std::string("non_finite_check_and_unscale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::vector<HostInput> in;
      if (v.kind == 0) {
        in = mixed_tensors(rng, {20011, 4096, 3000, 1, 777}, -14, 14, 0.0);
      } else if (v.kind == 1) {
        in = {from_values({(int64_t{1} << 20) + 13}, DType::f32,
                          random_values(rng, (size_t{1} << 20) + 13, -14, 14))};
      } else {
        in = mixed_tensors(rng, many_sizes(rng, 230), -8, 8, 0.0);
      }
      size_t total = 0;
      for (const HostInput& h : in) total += h.bits.size();
      // Segment starts: every tensor boundary, plus random cuts (mid-word ones included).
      std::vector<int32_t> starts = {0};
      size_t at = 0;
      for (const HostInput& h : in) {
        at += h.bits.size();
        if (at < total) starts.push_back(static_cast<int32_t>(at));
      }
      for (int i = 0; i < 40; ++i) starts.push_back(static_cast<int32_t>(1 + rng() % (total - 1)));
      std::sort(starts.begin(), starts.end());
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      // inf / NaN at: a few random elements, the first and last element of some segments.
      std::vector<size_t> bad;
      for (int i = 0; i < 6; ++i) bad.push_back(rng() % total);
      for (size_t s = 1; s < starts.size(); s += 7) {
        bad.push_back(static_cast<size_t>(starts[s]));
        bad.push_back(static_cast<size_t>(starts[s]) - 1);
      }
      const float specials[] = {std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
      for (size_t e : bad) {
        for (HostInput& h : in) {
          if (e < h.bits.size()) {
            h.bits[e] = encode(specials[rng() % 3], h.dtype);
            break;
          }
          e -= h.bits.size();
        }
      }
      in.push_back(scalar_input(0.0f));
      in.push_back(scalar_input(v.inv_scale));
      in.push_back(from_i32({static_cast<int64_t>(starts.size())}, starts));
      in.push_back(
          from_i32({static_cast<int64_t>(starts.size())}, std::vector<int32_t>(starts.size(), 0)));
      return in;
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      const size_t n = in.size() - 4;
      be.non_finite_check_and_unscale_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1],
                                       in[n + 2], in[n + 3]);
      std::vector<Tensor> out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
      out.push_back(in[n + 3]);
      return out;
    };
    cases.push_back(c);
  }
}

// The check pass with the norm (non_finite_check_unscale_norm_): per variant two rows, the
// tensors, found_inf and segment flags bitwise (they must equal non_finite_check_and_unscale_'s),
// and the norm within global_norm's 1e-6 relative budget (both sides sum in double, in their own
// backend's global_norm order).
void add_unscale_norm_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    bool unscale;
    double special;
    int kind;  // 0: mixed tensors, 1: one flat f32 arena with segments, 2: many tensors
  };
  const Variant variants[] = {
      {"unscale_pow2", 0x1p-16f, true, 0.0, 0},
      {"check_only_inexact", 1.0f / 3.0f, false, 0.0, 0},
      {"unscale_inexact_arena_segments", 1.0f / 3.0f, true, 0.0, 1},
      {"check_only_arena_segments_with_inf", 0x1p-12f, false, 0.0005, 1},
      {"unscale_many_tensors", 0x1p-10f, true, 0.0, 2},
      {"unscale_with_inf_nan", 0x1p-16f, true, 0.002, 0},
  };
  for (const Variant& v : variants) {
    for (const bool norm_row : {false, true}) {
      OpCase c;
      c.name = std::string("non_finite_check_unscale_norm_") + v.name + (norm_row ? "_norm" : "");
      c.make_inputs = [v](std::mt19937_64& rng) {
        std::vector<HostInput> in;
        if (v.kind == 1) {
          in = {from_values({(int64_t{1} << 20) + 13}, DType::f32,
                            random_with_specials(rng, (size_t{1} << 20) + 13, -14, 14, v.special))};
        } else if (v.kind == 2) {
          in = mixed_tensors(rng, many_sizes(rng, 200), -8, 8, 0.0);
        } else {
          in = mixed_tensors(rng, {20011, 4096, 3000, 1}, -14, 14, v.special);
        }
        const size_t total = in.size() == 1 ? in[0].bits.size() : 0;
        in.push_back(scalar_input(0.0f));
        in.push_back(scalar_input(v.inv_scale));
        in.push_back(scalar_input(0.0f));  // the norm
        if (v.kind == 1) {
          std::vector<int32_t> starts = {0};
          for (int i = 0; i < 30; ++i)
            starts.push_back(static_cast<int32_t>(1 + rng() % (total - 1)));
          std::sort(starts.begin(), starts.end());
          starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
          in.push_back(from_i32({static_cast<int64_t>(starts.size())}, starts));
          in.push_back(from_i32({static_cast<int64_t>(starts.size())},
                                std::vector<int32_t>(starts.size(), 0)));
        }
        return in;
      };
      c.run = [v, norm_row](Backend& be, std::vector<Tensor>& in) {
        const size_t extra = v.kind == 1 ? 5 : 3;
        const size_t n = in.size() - extra;
        const Tensor none;
        be.non_finite_check_unscale_norm_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1],
                                          v.unscale, in[n + 2], v.kind == 1 ? in[n + 3] : none,
                                          v.kind == 1 ? in[n + 4] : none);
        if (norm_row) return std::vector<Tensor>{in[n + 2]};
        std::vector<Tensor> out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
        if (v.kind == 1) out.push_back(in[n + 4]);
        return out;
      };
      if (norm_row) c.metric = Metric::relative_1e6;
      cases.push_back(c);
    }
  }
}

void add_inv_scale_case(std::vector<OpCase>& cases) {
  OpCase c;
  c.name = "inv_scale";
  c.make_inputs = [](std::mt19937_64& rng) {
    std::vector<float> scales;
    for (int e = -149; e <= 127; e += 7) scales.push_back(std::ldexp(1.0f, e));
    for (float s : {3.0f, 65536.0f, 1e-40f, 3.4028235e38f, 0.0f, -0.0f, INFINITY, -2.0f, NAN}) {
      scales.push_back(s);
    }
    for (int i = 0; i < 100; ++i) scales.push_back(random_value(rng, -100, 100));
    for (int i = 0; i < 50; ++i)
      scales.push_back(bits_float(static_cast<uint32_t>(rng()) & 0x7fffffffu));
    return std::vector<HostInput>{
        from_values({static_cast<int64_t>(scales.size())}, DType::f32, scales)};
  };
  c.run = [](Backend& be, std::vector<Tensor>& in) {
    Tensor out = be.empty(in[0].shape(), DType::f32);
    for (size_t i = 0; i < in[0].numel(); ++i) be.inv_scale(in[0].view(i, {1}), out.view(i, {1}));
    return std::vector<Tensor>{out};
  };
  cases.push_back(c);
}

void add_update_scale_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    amp::ScaleUpdateParams params;
    float scale0;
    double p_inf;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Variant variants[] = {
      {"pytorch", {2.0, 0.5, 3, 1, 0.0f, inf}, 65536.0f, 0.3},
      {"hysteresis_min_max", {2.0, 0.25, 2, 3, 1.0f, 0x1p20f}, 1024.0f, 0.4},
      {"inexact_factors", {1.5, 0.3, 1, 1, 0.0f, inf}, 3.0f, 0.5},
      {"growth_overflows", {2.0, 0.5, 1, 1, 0.0f, inf}, 1e38f, 0.1},
      {"backoff_to_subnormal", {2.0, 0.5, 50, 1, 0.0f, inf}, 1e-36f, 0.9},
      // The scale rules (scaler.policy) on the golden file's settings (scaler_policies.json).
      {"deepspeed", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::deepspeed}, 65536.0f, 0.3},
      {"deepspeed_hysteresis",
       {2.0, 0.5, 3, 3, 0.0f, inf, amp::ScalePolicy::deepspeed},
       65536.0f,
       0.4},
      {"deepspeed_consecutive",
       {2.0, 0.5, 3, 2, 0.0f, inf, amp::ScalePolicy::deepspeed, true},
       65536.0f,
       0.4},
      {"deepspeed_floor_odd",
       {1.7, 0.3, 2, 2, 1.0f, inf, amp::ScalePolicy::deepspeed},
       256.0f,
       0.6},
      {"deepspeed_near_max",
       {2.0, 0.5, 1, 1, 0.0f, inf, amp::ScalePolicy::deepspeed},
       0x1p125f,
       0.05},
      {"megatron", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::megatron}, 65536.0f, 0.3},
      {"megatron_hysteresis_odd",
       {1.7, 0.3, 3, 2, 1.0f, inf, amp::ScalePolicy::megatron},
       1234.5f,
       0.4},
      {"megatron_near_max",
       {2.0, 0.5, 1, 1, 0.0f, inf, amp::ScalePolicy::megatron},
       0x1p125f,
       0.05},
      {"fairseq", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::fairseq}, 65536.0f, 0.3},
      {"fairseq_tolerance",
       {2.0, 0.5, 16, 1, 2.0f, inf, amp::ScalePolicy::fairseq, false, 0.25},
       65536.0f,
       0.2},
      {"fairseq_odd_near_max",
       {1.7, 0.3, 1, 1, 0.0f, inf, amp::ScalePolicy::fairseq},
       0x1p125f,
       0.1},
  };
  constexpr int kSteps = 200;
  for (const Variant& v : variants) {
    OpCase c;
    c.name = std::string("update_scale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<float> found(kSteps);
      for (float& f : found) f = u(rng) < v.p_inf ? 1.0f : 0.0f;
      return std::vector<HostInput>{
          from_values({kSteps}, DType::f32, found), scalar_input(v.scale0), from_i32({1}, {0}),
          from_i32({1}, {v.params.hysteresis}), from_i32({amp::kTrackerCount}, {0, -1, -1, 0})};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor found = be.empty({1}, DType::f32);
      Tensor scales = be.empty({kSteps}, DType::f32);
      Tensor growth = be.empty({kSteps}, DType::i32);
      Tensor hysteresis = be.empty({kSteps}, DType::i32);
      Tensor trackers = be.empty({kSteps * amp::kTrackerCount}, DType::i32);
      for (size_t i = 0; i < kSteps; ++i) {
        be.copy(found, in[0].view(i, {1}));
        be.update_scale_(in[1], in[2], in[3], in[4], found, v.params);
        be.copy(scales.view(i, {1}), in[1]);
        be.copy(growth.view(i, {1}), in[2]);
        be.copy(hysteresis.view(i, {1}), in[3]);
        be.copy(trackers.view(i * amp::kTrackerCount, {amp::kTrackerCount}), in[4]);
      }
      return std::vector<Tensor>{scales, growth, hysteresis, trackers};
    };
    cases.push_back(c);
  }
}

void add_sgd_cases(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    optim::SgdHyper hyper;
    bool use_inv_scale;
    bool use_found_inf;
  };
  const Variant variants[] = {
      {"plain", {0.1f, 0.0f, 0.0f, 0.0f, false, false}, false, false},
      {"momentum_dampening_wd", {0.01f, 0.9f, 0.1f, 1e-4f, false, false}, true, true},
      {"nesterov_maximize", {0.03f, 0.8f, 0.0f, 0.01f, true, true}, true, false},
      {"wd_no_momentum", {0.05f, 0.0f, 0.0f, 0.1f, false, false}, true, true},
  };
  constexpr int64_t n = 10007;
  constexpr int kSteps = 3;
  for (const Variant& v : variants) {
    // i32 stands for "no copy"; an f32 copy is a plain copy in the same pass.
    for (DType lowp : {DType::i32, DType::f32, DType::f16, DType::bf16}) {
      OpCase c;
      c.name = std::string("sgd_step_") + v.name +
               (lowp == DType::i32 ? "" : std::string("_lowp_") + dtype_name(lowp));
      c.make_inputs = [v, lowp](std::mt19937_64& rng) {
        // The middle step is skipped when found_inf is used: momentum is initialised on the
        // first real step and the counter counts real steps only.
        std::vector<float> found = {0.0f, 1.0f, 0.0f};
        return std::vector<HostInput>{
            from_values({n}, DType::f32, random_values(rng, n, -4, 2)),
            from_values({kSteps, n}, DType::f32, random_values(rng, kSteps * n, -2, 14)),
            // Garbage in the buffer: the first step must overwrite it, not blend it in.
            from_values({n}, DType::f32, random_values(rng, n, -3, 3)),
            from_i32({1}, {0}),
            from_values({kSteps}, DType::f32, found),
            scalar_input(0x1p-12f),
            from_values({n}, lowp == DType::i32 ? DType::f16 : lowp, std::vector<float>(n, 0.0f)),
        };
      };
      c.run = [v, lowp](Backend& be, std::vector<Tensor>& in) {
        for (int s = 0; s < kSteps; ++s) {
          OptimizerStepArgs args;
          args.params = in[0];
          args.grads = in[1].view(static_cast<size_t>(s * n), {n});
          if (v.hyper.momentum != 0.0f) args.momentum_buf = in[2];
          args.step = in[3];
          if (v.use_found_inf) args.found_inf = in[4].view(static_cast<size_t>(s), {1});
          if (v.use_inv_scale) args.inv_scale = in[5];
          if (lowp != DType::i32) args.lowp_params = in[6];
          args.hyper = v.hyper;
          be.optimizer_step(args);
        }
        std::vector<Tensor> out = {in[0], in[2], in[3]};
        if (lowp != DType::i32) out.push_back(in[6]);
        return out;
      };
      cases.push_back(c);
    }
  }
}

// round_counted (backend.h, "gradient numerics"): the rounded values and every counter (the
// int64 words compared as i32 pairs, bit for bit) over values from f32's subnormals to past
// 65504, with zeros, infinities and NaNs; two calls into one counters row (accumulation).
void add_round_counted_cases(std::vector<OpCase>& cases) {
  for (DType dst : {DType::f16, DType::bf16}) {
    OpCase c;
    c.name = std::string("round_counted_to_") + dtype_name(dst);
    c.make_inputs = [](std::mt19937_64& rng) {
      std::vector<float> v = random_with_specials(rng, 40000, -149, 127, 0.01);
      for (size_t i = 0; i < v.size(); i += 17) v[i] = 0.0f;
      for (size_t i = 5; i < v.size(); i += 29) v[i] = std::ldexp(v[i], -30);  // near 2^-25
      return std::vector<HostInput>{from_values({static_cast<int64_t>(v.size())}, DType::f32, v)};
    };
    c.run = [dst](Backend& be, std::vector<Tensor>& in) {
      const Tensor& src = in[0];
      const auto n = static_cast<int64_t>(src.numel());
      Tensor out = be.zeros({n}, dst);
      Tensor counters = be.zeros({numerics::kWords}, DType::i32);
      be.round_counted(src.view(0, {n / 2}), out.view(0, {n / 2}), counters);
      be.round_counted(src.view(static_cast<size_t>(n / 2), {n - n / 2}),
                       out.view(static_cast<size_t>(n / 2), {n - n / 2}), counters);
      return std::vector<Tensor>{out, counters};
    };
    cases.push_back(std::move(c));
  }
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  add_cast_cases(cases);
  add_fill_cases(cases);
  add_elementwise_cases(cases);
  add_global_norm_cases(cases);
  add_unscale_cases(cases);
  add_unscale_segment_cases(cases);
  add_unscale_norm_cases(cases);
  add_inv_scale_case(cases);
  add_update_scale_cases(cases);
  add_sgd_cases(cases);
  add_round_counted_cases(cases);
  return cases;
}

// ---- running and comparing ----

struct Output {
  DType dtype;
  std::vector<uint32_t> bits;
};

std::vector<Output> run_case(Backend& be, const OpCase& c, const std::vector<HostInput>& inputs) {
  std::vector<Tensor> in;
  for (const HostInput& h : inputs) in.push_back(upload_bits(be, h.shape, h.dtype, h.bits));
  std::vector<Output> out;
  for (const Tensor& t : c.run(be, in)) out.push_back({t.dtype(), download_bits(be, t)});
  return out;
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

void expect_relative(const Output& got, const Output& want, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.bits.size()) << what;
  ErrorBudget budget;
  for (size_t i = 0; i < got.bits.size(); ++i) {
    const double g = decode(got.bits[i], got.dtype);
    const double w = decode(want.bits[i], want.dtype);
    budget.add(i, g, w, tolerance * std::fabs(w));
  }
  EXPECT_TRUE(budget.ok()) << what << " (got = cuda, expected = cpu): " << budget.report();
}

class CudaVsCpu : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaVsCpu, MatchesCpuReference) {
  AMPCTL_REQUIRE_GPU();
  const OpCase& c = GetParam();
  std::mt19937_64 rng(seed_of(c.name));
  const std::vector<HostInput> inputs = c.make_inputs(rng);
  const std::vector<Output> want = run_case(cpu(), c, inputs);
  const std::vector<Output> got = run_case(gpu(), c, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string what = c.name + ", output " + std::to_string(i);
    ASSERT_EQ(got[i].dtype, want[i].dtype) << what;
    if (c.metric == Metric::bitwise) {
      expect_bitwise(got[i], want[i], what);
    } else {
      expect_relative(got[i], want[i], 1e-6, what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaVsCpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

// ---- gemm ----

// GemmBound: for output element (i, j), with S = |alpha| sum_l |a_il||b_lj| + |beta||c0_ij| and
// exact = alpha sum_l a_il b_lj + beta c0_ij over the inputs as stored (f16/bf16 widened
// exactly):
//   * fp32 evaluation. Every term of the sum passes through at most k + 2 roundings (its product,
//     at most k additions, one multiplication by alpha or beta), in any order and blocking
//     (cuBLAS's tiles, split-K, the CPU's OpenBLAS kernels). Tensor cores may truncate rather
//     than round to nearest inside the accumulation, so each rounding is bounded by
//     u = 2^-23 (not 2^-24): |y - exact| <= gamma_{k+2}(2^-23) * S, with
//     gamma_n(u) = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms,
//     section 3.1). Same bound for both backends.
//   * rounding y to the output dtype: |round(y) - y| <= u_out |y| + eta_out with u_out = 2^-24,
//     2^-11, 2^-8 (f32, f16, bf16) and eta_out = half the smallest subnormal (2^-150, 2^-25,
//     2^-134) for results in the subnormal range; |y| <= |ref| + gamma S + ref_err.
//   * the fp64 reference: products of floats are exact in double, then k + 1 roundings:
//     ref_err <= gamma_{k+2}(2^-53) * S.
//   bound = gamma S + u_out (|ref| + gamma S + ref_err) + eta_out + ref_err.
double gamma_n(double n, double u) {
  return n * u / (1.0 - n * u);
}

double unit_roundoff_of(DType d) {
  return d == DType::f16 ? 0x1p-11 : d == DType::bf16 ? 0x1p-8 : 0x1p-24;
}

double half_min_subnormal_of(DType d) {
  return d == DType::f16 ? 0x1p-25 : d == DType::bf16 ? 0x1p-134 : 0x1p-150;
}

struct GemmCase {
  DType a, b, c;
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
};

std::string gemm_name(const GemmCase& g) {
  auto num = [](float x) {
    std::string s = std::to_string(static_cast<int>(std::lround(x * 100)));
    for (char& ch : s) {
      if (ch == '-') ch = 'm';
    }
    return s;
  };
  return std::string(dtype_name(g.a)) + (g.trans_a ? "T" : "N") + "_" + dtype_name(g.b) +
         (g.trans_b ? "T" : "N") + "_to_" + dtype_name(g.c) + "_" + std::to_string(g.m) + "x" +
         std::to_string(g.n) + "x" + std::to_string(g.k) + "_a" + num(g.alpha) + "_b" + num(g.beta);
}

void PrintTo(const GemmCase& g, std::ostream* os) {
  *os << gemm_name(g);
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  // cuBLAS's direct types, then the ones that go through the widening workspace.
  const DType types[][3] = {
      {f32, f32, f32}, {f16, f16, f16},  {f16, f16, f32},   {bf16, bf16, bf16}, {bf16, bf16, f32},
      {f16, f32, f32}, {f32, bf16, f16}, {f16, bf16, bf16}, {f16, f16, bf16},   {f32, f32, f16}};
  for (const auto& t : types) {
    for (int trans = 0; trans < 4; ++trans) {
      cases.push_back(
          {t[0], t[1], t[2], (trans & 1) != 0, (trans & 2) != 0, 37, 45, 300, 1.0f, 0.0f});
    }
    cases.push_back({t[0], t[1], t[2], false, true, 64, 128, 1024, 0.5f, -1.25f});
    cases.push_back({t[0], t[1], t[2], true, false, 1, 1, 1, 2.0f, 1.0f});
    cases.push_back({t[0], t[1], t[2], false, false, 5, 7, 0, 1.0f, 0.5f});  // C := beta C
  }
  return cases;
}

// Elements of op(X) for a row-major X stored as [rows, cols] (transposed: [cols, rows]).
double op_element(const std::vector<float>& x, bool trans, int64_t rows, int64_t cols, int64_t r,
                  int64_t c) {
  return trans ? x[static_cast<size_t>(c * rows + r)] : x[static_cast<size_t>(r * cols + c)];
}

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CudaGemm, WithinDerivedBoundOfFp64) {
  AMPCTL_REQUIRE_GPU();
  const GemmCase& g = GetParam();
  std::mt19937_64 rng(seed_of(gemm_name(g)));
  const Shape a_shape = g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k};
  const Shape b_shape = g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
  // Mixed signs over a few binades: cancellation makes the relative error of the result large,
  // which is what the bound in S (not |exact|) is for.
  const HostInput a =
      from_values(a_shape, g.a, random_values(rng, static_cast<size_t>(g.m * g.k), -3, 2));
  const HostInput b =
      from_values(b_shape, g.b, random_values(rng, static_cast<size_t>(g.k * g.n), -3, 2));
  const HostInput c0 =
      from_values({g.m, g.n}, g.c, random_values(rng, static_cast<size_t>(g.m * g.n), -2, 2));

  std::vector<float> av(a.bits.size()), bv(b.bits.size()), cv(c0.bits.size());
  for (size_t i = 0; i < av.size(); ++i) av[i] = decode(a.bits[i], g.a);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = decode(b.bits[i], g.b);
  for (size_t i = 0; i < cv.size(); ++i) cv[i] = decode(c0.bits[i], g.c);

  auto run = [&](Backend& be) {
    Tensor ta = upload_bits(be, a.shape, a.dtype, a.bits);
    Tensor tb = upload_bits(be, b.shape, b.dtype, b.bits);
    Tensor tc = upload_bits(be, c0.shape, c0.dtype, c0.bits);
    be.gemm(ta, g.trans_a, tb, g.trans_b, tc, g.alpha, g.beta);
    return download_values(be, tc);
  };
  const std::vector<float> got_gpu = run(gpu());
  const std::vector<float> got_cpu = run(cpu());

  const double gamma = gamma_n(static_cast<double>(g.k + 2), 0x1p-23);
  const double gamma_ref = gamma_n(static_cast<double>(g.k + 2), 0x1p-53);
  const double u_out = unit_roundoff_of(g.c), eta_out = half_min_subnormal_of(g.c);
  ErrorBudget gpu_budget, cpu_budget;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double ref = 0.0, s = 0.0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double p =
            op_element(av, g.trans_a, g.m, g.k, i, l) * op_element(bv, g.trans_b, g.k, g.n, l, j);
        ref += p;
        s += std::fabs(p);
      }
      const size_t idx = static_cast<size_t>(i * g.n + j);
      ref = g.alpha * ref + (g.beta != 0.0f ? g.beta * cv[idx] : 0.0);
      s = std::fabs(g.alpha) * s + std::fabs(g.beta) * (g.beta != 0.0f ? std::fabs(cv[idx]) : 0.0);
      const double ref_err = gamma_ref * s;
      const double bound =
          gamma * s + u_out * (std::fabs(ref) + gamma * s + ref_err) + eta_out + ref_err;
      gpu_budget.add(idx, got_gpu[idx], ref, bound);
      cpu_budget.add(idx, got_cpu[idx], ref, bound);
    }
  }
  EXPECT_TRUE(gpu_budget.ok()) << "cuda vs fp64: " << gpu_budget.report();
  EXPECT_TRUE(cpu_budget.ok()) << "cpu vs fp64: " << cpu_budget.report();
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemm, ::testing::ValuesIn(gemm_cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           return gemm_name(info.param);
                         });

// ---- properties of the GPU alone ----

// Repeated products on the same inputs give the same bits (no split-K atomics, fixed workspace).
TEST(CudaDeterminism, RepeatedGemmIsBitwiseIdentical) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t m = 512, n = 384, k = 4096;
    Tensor a = upload_values(gpu(), {m, k}, d, random_values(rng, m * k, -3, 2));
    Tensor b = upload_values(gpu(), {n, k}, d, random_values(rng, n * k, -3, 2));
    std::vector<uint32_t> first;
    for (int rep = 0; rep < 3; ++rep) {
      Tensor c = gpu().empty({m, n}, d);
      gpu().gemm(a, false, b, true, c, 1.0f, 0.0f);
      std::vector<uint32_t> bits = download_bits(gpu(), c);
      if (rep == 0) {
        first = bits;
        continue;
      }
      BitwiseCheck check(d);
      check.add_all(bits, first);
      EXPECT_TRUE(check.ok()) << dtype_name(d) << " repetition " << rep << ": " << check.report();
    }
  }
}

TEST(CudaDeterminism, RepeatedGlobalNormIsBitwiseIdentical) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  std::vector<Tensor> tensors;
  for (DType d : kFloatDTypes)
    tensors.push_back(upload_values(gpu(), {1 << 20}, d, random_values(rng, 1 << 20, -8, 8)));
  Tensor out = gpu().empty({1}, DType::f32);
  gpu().global_norm(tensors, out);
  const uint32_t first = float_bits(gpu().read_scalar_f32(out));
  for (int rep = 0; rep < 5; ++rep) {
    gpu().global_norm(tensors, out);
    EXPECT_EQ(float_bits(gpu().read_scalar_f32(out)), first) << "repetition " << rep;
  }
}

// A step with found_inf set writes nothing: params, momentum buffer, lowp copy and step keep every
// bit, NaN payloads included.
TEST(CudaSgdStep, SkippedStepLeavesStateBitwiseUnchanged) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  const int64_t n = 4099;
  for (bool first_step : {true, false}) {
    std::vector<uint32_t> param_bits(n), buf_bits(n), lowp_bits(n);
    for (auto& b : param_bits) b = static_cast<uint32_t>(rng());  // any bits, NaNs included
    for (auto& b : buf_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : lowp_bits) b = static_cast<uint32_t>(rng()) & 0xffffu;
    OptimizerStepArgs args;
    args.params = upload_bits(gpu(), {n}, DType::f32, param_bits);
    args.grads = upload_values(gpu(), {n}, DType::f32, random_values(rng, n, -4, 4));
    args.momentum_buf = upload_bits(gpu(), {n}, DType::f32, buf_bits);
    args.step = scalar_i32(gpu(), first_step ? 0 : 5);
    args.found_inf = scalar_f32(gpu(), 1.0f);
    args.inv_scale = scalar_f32(gpu(), 0x1p-8f);
    args.lowp_params = upload_bits(gpu(), {n}, DType::f16, lowp_bits);
    args.hyper = optim::SgdHyper{0.1f, 0.9f, 0.0f, 0.01f, true, false};
    gpu().optimizer_step(args);
    BitwiseCheck params(DType::f32), buf(DType::f32), lowp(DType::f16);
    params.add_all(download_bits(gpu(), args.params), param_bits);
    buf.add_all(download_bits(gpu(), args.momentum_buf), buf_bits);
    lowp.add_all(download_bits(gpu(), args.lowp_params), lowp_bits);
    EXPECT_TRUE(params.ok()) << "params: " << params.report();
    EXPECT_TRUE(buf.ok()) << "momentum_buf: " << buf.report();
    EXPECT_TRUE(lowp.ok()) << "lowp_params: " << lowp.report();
    EXPECT_EQ(gpu().read_scalar_i32(args.step), first_step ? 0 : 5);
  }
}

TEST(CudaBackend, DescribesItselfAndRejectsWrongArguments) {
  AMPCTL_REQUIRE_GPU();
  EXPECT_TRUE(cuda_compiled());
  EXPECT_FALSE(cuda_architectures().empty());
  EXPECT_EQ(gpu().device(), (Device{DeviceType::cuda, 0}));
  EXPECT_NE(gpu().description().find("cuda:0"), std::string::npos) << gpu().description();
  try {
    (void)make_cuda_backend(cuda_device_count());
    ADD_FAILURE() << "make_cuda_backend with an index past the last GPU did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::cuda) << e.what();
    EXPECT_FALSE(e.hint().empty()) << e.what();
  }
  Tensor host = Tensor::host({4}, DType::f32);
  Tensor dev = gpu().zeros({4}, DType::f32);
  expect_invalid_argument([&] { gpu().add_(dev, host); }, "add_ with a host tensor");
  expect_invalid_argument([&] { gpu().cast(dev, gpu().empty({5}, DType::f16)); }, "cast, numel");
  expect_invalid_argument(
      [&] {
        gpu().gemm(gpu().empty({2, 3}, DType::f32), false, gpu().empty({4, 5}, DType::f32), false,
                   gpu().empty({2, 5}, DType::f32));
      },
      "gemm, inner dimensions");
  expect_invalid_argument([&] { gpu().fill(gpu().empty({2}, DType::i32), 0.5); }, "fill i32 0.5");
}

}  // namespace
}  // namespace ampctl::test
