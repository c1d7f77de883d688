// Helpers for the backend tests: moving values in and out of tensors as exact bit patterns,
// an error-budget reporter (worst element, both values, share of the tolerance used) and a
// bitwise reporter. References in the tests are computed without the backend, in double or with
// half.h's scalar conversions, so every helper here stays on the host and never calls an op
// under test except upload/download.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/core/tensor.h"

namespace ampctl {
// GoogleTest prints parameters with PrintTo found by argument-dependent lookup.
inline void PrintTo(DType d, std::ostream* os) {
  *os << dtype_name(d);
}
}  // namespace ampctl

namespace ampctl::test {

// Two threads: the machines that run these tests have few cores, and a multi-threaded backend is
// what exercises the partitioning of work.
inline std::unique_ptr<Backend> cpu_backend(int threads = 2) {
  return make_cpu_backend(threads);
}

constexpr DType kFloatDTypes[] = {DType::f32, DType::f16, DType::bf16};

// ---- one element as storage bits ----

// The storage bits of v in dtype d (f16/bf16: rounded once by half.h's scalar conversion).
inline uint32_t encode(float v, DType d) {
  switch (d) {
    case DType::f32:
      return float_bits(v);
    case DType::f16:
      return float_to_half_bits_portable(v);
    case DType::bf16:
      return float_to_bf16_bits_portable(v);
    case DType::i32:
      break;
  }
  ADD_FAILURE() << "encode: not a float dtype";
  return 0;
}

// The exact float value of storage bits b of dtype d.
inline float decode(uint32_t b, DType d) {
  switch (d) {
    case DType::f32:
      return bits_float(b);
    case DType::f16:
      return half_bits_to_float_portable(static_cast<uint16_t>(b));
    case DType::bf16:
      return bf16_bits_to_float(static_cast<uint16_t>(b));
    case DType::i32:
      break;
  }
  ADD_FAILURE() << "decode: not a float dtype";
  return 0;
}

// v rounded once to dtype d, as a float.
inline float round_to(float v, DType d) {
  return decode(encode(v, d), d);
}

inline bool is_nan_bits(uint32_t b, DType d) {
  return std::isnan(decode(b, d));
}

// ---- tensors <-> bit vectors ----

inline Tensor upload_bits(Backend& be, const Shape& shape, DType d,
                          const std::vector<uint32_t>& bits) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  EXPECT_EQ(n, bits.size()) << "upload_bits: shape " << shape_str(shape);
  Tensor host = Tensor::host(shape, d);
  if (dtype_size(d) == 4) {
    auto* p = static_cast<uint32_t*>(host.data());
    for (size_t i = 0; i < n; ++i) p[i] = bits[i];
  } else {
    auto* p = static_cast<uint16_t*>(host.data());
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(bits[i]);
  }
  return be.from_host(shape, d, host.data());
}

// Each value rounded once to d by half.h (the inputs of an op are the already-rounded values).
inline Tensor upload_values(Backend& be, const Shape& shape, DType d, const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = encode(v[i], d);
  return upload_bits(be, shape, d, bits);
}

inline Tensor upload_i32(Backend& be, const Shape& shape, const std::vector<int32_t>& v) {
  EXPECT_EQ(static_cast<size_t>(shape_numel(shape)), v.size());
  return be.from_host(shape, DType::i32, v.data());
}

inline Tensor scalar_f32(Backend& be, float v) {
  return be.from_host({1}, DType::f32, &v);
}
inline Tensor scalar_i32(Backend& be, int32_t v) {
  return be.from_host({1}, DType::i32, &v);
}

inline std::vector<uint32_t> download_bits(Backend& be, const Tensor& t) {
  Tensor host = be.to_host(t);
  std::vector<uint32_t> bits(t.numel());
  if (dtype_size(t.dtype()) == 4) {
    const auto* p = static_cast<const uint32_t*>(host.data());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = p[i];
  } else {
    const auto* p = static_cast<const uint16_t*>(host.data());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = p[i];
  }
  return bits;
}

// Widened exactly to float.
inline std::vector<float> download_values(Backend& be, const Tensor& t) {
  std::vector<uint32_t> bits = download_bits(be, t);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = decode(bits[i], t.dtype());
  return v;
}

inline std::vector<int32_t> download_i32(Backend& be, const Tensor& t) {
  std::vector<int32_t> v(t.numel());
  be.download(v.data(), t);
  return v;
}

// ---- random inputs ----

// Uniform in [-1, 1) times 2^e, e uniform in [emin, emax]: magnitudes spread over several
// binades, so rounding happens at many different exponents; never zero with probability ~1.
inline float random_value(std::mt19937_64& rng, int emin, int emax) {
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(emin, emax);
  return std::ldexp(mant(rng), e(rng));
}

inline std::vector<float> random_values(std::mt19937_64& rng, size_t n, int emin, int emax) {
  std::vector<float> v(n);
  for (float& x : v) x = random_value(rng, emin, emax);
  return v;
}

// ---- reporting ----

inline std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

inline std::string hex(uint32_t b, DType d) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(dtype_size(d) == 4 ? 8 : 4) << std::setfill('0') << b;
  return os.str();
}

// Accumulates |got - expected| <= bound over many elements and reports the worst one: its index,
// both values, the error and the share of the bound it used.
class ErrorBudget {
 public:
  void add(size_t index, double got, double expected, double bound) {
    ++m_count;
    double err = std::fabs(got - expected);
    double ratio;
    if (std::isnan(got) || std::isnan(expected) || std::isinf(got) || std::isinf(expected)) {
      const bool same = (std::isnan(got) && std::isnan(expected)) || got == expected;
      ratio = same ? 0.0 : std::numeric_limits<double>::infinity();
      err = same ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      ratio = bound > 0 ? err / bound : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    }
    if (ratio > 1.0) ++m_failures;
    if (m_count == 1 || ratio > m_worst_ratio) {
      m_worst_ratio = ratio;
      m_index = index;
      m_got = got;
      m_expected = expected;
      m_err = err;
      m_bound = bound;
    }
  }
  bool ok() const { return m_failures == 0; }
  double worst_ratio() const { return m_worst_ratio; }
  std::string report() const {
    std::ostringstream os;
    os << m_failures << " of " << m_count << " elements outside the bound; worst element "
       << m_index << ": got " << fmt(m_got) << ", expected " << fmt(m_expected) << ", |err| "
       << fmt(m_err) << ", bound " << fmt(m_bound) << " (" << std::setprecision(4)
       << 100.0 * m_worst_ratio << "% of the budget)";
    return os.str();
  }

 private:
  size_t m_count = 0;
  size_t m_failures = 0;
  double m_worst_ratio = 0;
  size_t m_index = 0;
  double m_got = 0, m_expected = 0, m_err = 0, m_bound = 0;
};

// Bitwise comparison of storage bits; with nan_any, any NaN matches any NaN (for arithmetic
// results, where IEEE 754 leaves the payload to the implementation). Reports the first mismatch.
class BitwiseCheck {
 public:
  explicit BitwiseCheck(DType d, bool nan_any = false) : m_dtype(d), m_nan_any(nan_any) {}
  void add(size_t index, uint32_t got, uint32_t expected) {
    ++m_count;
    if (got == expected) return;
    if (m_nan_any && is_nan_bits(got, m_dtype) && is_nan_bits(expected, m_dtype)) return;
    if (m_mismatches++ == 0) {
      m_index = index;
      m_got = got;
      m_expected = expected;
    }
  }
  void add_all(const std::vector<uint32_t>& got, const std::vector<uint32_t>& expected) {
    EXPECT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) add(i, got[i], expected[i]);
  }
  bool ok() const { return m_mismatches == 0; }
  std::string report() const {
    std::ostringstream os;
    os << m_mismatches << " of " << m_count << " " << dtype_name(m_dtype)
       << " elements differ (budget: 0 bits); first at " << m_index << ": got "
       << hex(m_got, m_dtype) << " (" << fmt(decode(m_got, m_dtype)) << "), expected "
       << hex(m_expected, m_dtype) << " (" << fmt(decode(m_expected, m_dtype)) << ")";
    return os.str();
  }

 private:
  DType m_dtype;
  bool m_nan_any;
  size_t m_count = 0;
  size_t m_mismatches = 0;
  size_t m_index = 0;
  uint32_t m_got = 0, m_expected = 0;
};

// Runs f and expects an ampctl::Error of kind invalid_argument.
template <typename F>
void expect_invalid_argument(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception, expected Error{invalid_argument}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument)
        << what << ": Error of kind " << to_string(e.kind()) << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": a non-ampctl exception: " << e.what();
  }
}

}  // namespace ampctl::test
