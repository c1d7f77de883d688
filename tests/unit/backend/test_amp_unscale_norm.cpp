// non_finite_check_unscale_norm_ on the CPU backend: the check pass that also gives the global
// norm of the unscaled gradients (the trainer's grad_norm). Its contract is a composition of two
// ops already tested against their own references: on copies of the same inputs, the tensors,
// found_inf and the segment flags must be bitwise non_finite_check_and_unscale_'s, and the norm
// bitwise global_norm's of the unscaled values. The norm is also checked against an fp64 sum
// written here (every square exact in double; the two orders differ by at most a few double
// roundings, far below one float ulp: 1e-6 relative is a generous float-level budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

struct Inputs {
  std::vector<DType> dtypes;
  std::vector<std::vector<float>> values;
};

Inputs make_inputs(std::mt19937_64& rng, const std::vector<size_t>& sizes, bool flat_f32) {
  Inputs in;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.dtypes.push_back(flat_f32 ? DType::f32 : kFloatDTypes[i % 3]);
    in.values.push_back(random_values(rng, sizes[i], -14, 14));
  }
  return in;
}

std::vector<Tensor> upload(Backend& be, const Inputs& in) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < in.values.size(); ++i) {
    out.push_back(
        upload_values(be, {static_cast<int64_t>(in.values[i].size())}, in.dtypes[i], in.values[i]));
  }
  return out;
}

void expect_same_bits(Backend& be, const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(download_bits(be, a[i]), download_bits(be, b[i])) << what << ", tensor " << i;
  }
}

struct Case {
  const char* name;
  std::vector<size_t> sizes;
  bool flat_f32;
  float inv;
  bool unscale;
  bool segments;
};

class UnscaleNorm : public ::testing::TestWithParam<Case> {};

TEST_P(UnscaleNorm, IsTheCheckPassAndGlobalNormOfItsResult) {
  const Case& c = GetParam();
  auto be = cpu_backend();
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  Inputs in = make_inputs(rng, c.sizes, c.flat_f32);
  size_t total = 0;
  for (size_t s : c.sizes) total += s;
  std::vector<int32_t> starts = {0};
  if (c.segments) {
    for (int i = 0; i < 25; ++i) starts.push_back(static_cast<int32_t>(1 + rng() % (total - 1)));
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    // One inf and one NaN, in two segments.
    in.values[0][rng() % in.values[0].size()] = std::numeric_limits<float>::infinity();
    in.values.back()[rng() % in.values.back().size()] = std::numeric_limits<float>::quiet_NaN();
  }
  const Shape seg_shape{static_cast<int64_t>(starts.size())};

  // The op under test.
  std::vector<Tensor> got = upload(*be, in);
  Tensor found = scalar_f32(*be, 0.0f), inv = scalar_f32(*be, c.inv), norm = scalar_f32(*be, -1);
  Tensor seg_starts = c.segments ? upload_i32(*be, seg_shape, starts) : Tensor{};
  Tensor seg_found =
      c.segments ? upload_i32(*be, seg_shape, std::vector<int32_t>(starts.size(), 0)) : Tensor{};
  be->non_finite_check_unscale_norm_(got, found, inv, c.unscale, norm, seg_starts, seg_found);

  // The composition: the check (unscaling when asked) on one copy; the norm of an unscaled copy.
  std::vector<Tensor> want = upload(*be, in);
  Tensor want_found = scalar_f32(*be, 0.0f);
  Tensor want_seg_found =
      c.segments ? upload_i32(*be, seg_shape, std::vector<int32_t>(starts.size(), 0)) : Tensor{};
  be->non_finite_check_and_unscale_(want, want_found, c.unscale ? inv : scalar_f32(*be, 1.0f),
                                    seg_starts, want_seg_found);
  std::vector<Tensor> unscaled = upload(*be, in);
  Tensor scratch_found = scalar_f32(*be, 0.0f);
  be->non_finite_check_and_unscale_(unscaled, scratch_found, inv);
  Tensor want_norm = scalar_f32(*be, -1);
  be->global_norm(unscaled, want_norm);

  expect_same_bits(*be, got, want, c.name);
  EXPECT_EQ(be->read_scalar_f32(found), be->read_scalar_f32(want_found)) << c.name;
  if (c.segments) {
    EXPECT_EQ(download_i32(*be, seg_found), download_i32(*be, want_seg_found)) << c.name;
    EXPECT_EQ(be->read_scalar_f32(found), 1.0f) << c.name;
  }
  const float n = be->read_scalar_f32(norm);
  const float wn = be->read_scalar_f32(want_norm);
  EXPECT_EQ(float_bits(n), float_bits(wn)) << c.name << ": " << n << " vs global_norm " << wn;

  if (!c.segments) {
    // fp64: each element unscaled as the op rounds it (to its dtype), squared and summed exactly
    // enough in double.
    double sum = 0;
    for (size_t t = 0; t < in.values.size(); ++t) {
      for (float v : in.values[t]) {
        const double u = round_to(round_to(v, in.dtypes[t]) * c.inv, in.dtypes[t]);
        sum += u * u;
      }
    }
    const double ref = std::sqrt(sum);
    EXPECT_NEAR(n, ref, 1e-6 * ref) << c.name;
    EXPECT_GT(ref, 0.0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, UnscaleNorm,
    ::testing::Values(
        Case{"unscale_mixed", {20011, 4096, 3000, 1, 0}, false, 0x1p-16f, true, false},
        Case{"check_only_mixed", {20011, 4096, 3000, 1}, false, 1.0f / 3.0f, false, false},
        Case{"unscale_arena", {100003}, true, 1.0f / 3.0f, true, false},
        Case{"check_only_arena", {100003}, true, 0x1p-12f, false, false},
        Case{"inv_one_arena", {8191}, true, 1.0f, true, false},
        Case{"segments_arena", {70001}, true, 0x1p-10f, true, true},
        Case{"segments_check_only_mixed", {9000, 5000, 777}, false, 0x1p-10f, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(UnscaleNorm, EmptyListHasNormZero) {
  auto be = cpu_backend();
  Tensor found = scalar_f32(*be, 0.0f), inv = scalar_f32(*be, 0.5f), norm = scalar_f32(*be, -1);
  be->non_finite_check_unscale_norm_({}, found, inv, true, norm);
  EXPECT_EQ(be->read_scalar_f32(norm), 0.0f);
  EXPECT_EQ(be->read_scalar_f32(found), 0.0f);
}

}  // namespace
}  // namespace ampctl::test
