// The RoundingProbe (rounding_probe.h) on the Llama / Qwen ops, the reference the coming model's
// numerics hook is held to: for each backward that rounds to f16/bf16 it records the float of
// every rounding, the lowp intermediates included (rms_norm_backward's dy * weight for a lowp x,
// swiglu_backward's dy * up, rope_backward's branch products), and the outputs' floats are the op
// run into f32 (each lowp output bit is the rounding of its recorded float); forward ops writing
// lowp tensors are flagged as unexpected in a backward.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/core/half.h"
#include "ampctl/nn/rope.h"
#include "rounding_probe.h"

namespace ampctl::nn {
namespace {

using probe::RoundingProbe;

std::vector<float> randoms(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor upload(Backend& be, const Shape& shape, DType d, const std::vector<float>& v) {
  const Tensor f = be.from_host(shape, DType::f32, v.data());
  if (d == DType::f32) return f;
  const Tensor t = be.empty(shape, d);
  be.cast(f, t);
  return t;
}

std::vector<float> floats_of(Backend& be, const Tensor& t) {
  const Tensor f = be.empty(t.shape(), DType::f32);
  be.cast(t, f);
  std::vector<float> v(t.numel());
  be.download(v.data(), f);
  return v;
}

const probe::Rounding* find(const RoundingProbe& p, const std::string& op) {
  for (const probe::Rounding& r : p.roundings()) {
    if (r.op == op) return &r;
  }
  return nullptr;
}

// Each lowp output element is the rounding of the float the probe recorded for it.
void expect_rounds_to(const probe::Rounding& r, const std::vector<float>& lowp, DType d) {
  ASSERT_EQ(r.pre.size(), lowp.size()) << r.op;
  for (size_t i = 0; i < lowp.size(); ++i) {
    const float want = d == DType::f16 ? round_to_half(r.pre[i]) : round_to_bf16(r.pre[i]);
    ASSERT_EQ(float_bits(want), float_bits(lowp[i])) << r.op << "[" << i << "]";
  }
}

TEST(RoundingProbe, SwigluBackwardRecordsDyUpAndItsOutputs) {
  RoundingProbe be(2);
  std::mt19937_64 rng(1);
  const int64_t R = 7, I = 12;
  const std::vector<float> gu = randoms(rng, static_cast<size_t>(R * 2 * I), -6, 6);
  const std::vector<float> dy = randoms(rng, static_cast<size_t>(R * I), -3, 3);
  const Tensor g = upload(be, {R, 2 * I}, DType::f16, gu), d = upload(be, {R, I}, DType::f16, dy);
  const Tensor out = be.empty({R, 2 * I}, DType::f16);
  be.arm(true);
  be.swiglu_backward(g, d, out);
  be.arm(false);
  const probe::Rounding* inner = find(be, "swiglu_backward (dy * up)");
  const probe::Rounding* outer = find(be, "swiglu_backward");
  ASSERT_NE(inner, nullptr);
  ASSERT_NE(outer, nullptr);
  const std::vector<float> gw = floats_of(be, g), dw = floats_of(be, d);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < I; ++c) {
      const size_t i = static_cast<size_t>(r * I + c);
      EXPECT_EQ(float_bits(inner->pre[i]),
                float_bits(dw[i] * gw[static_cast<size_t>(r * 2 * I + I + c)]));
    }
  }
  expect_rounds_to(*outer, floats_of(be, out), DType::f16);
  EXPECT_TRUE(be.unexpected().empty());
}

TEST(RoundingProbe, RmsNormBackwardRecordsDyWeightForLowpInputAndTheAccumulatedSum) {
  RoundingProbe be(2);
  std::mt19937_64 rng(2);
  const int64_t R = 9, C = 16;
  const Tensor x = upload(be, {R, C}, DType::bf16, randoms(rng, static_cast<size_t>(R * C), -2, 2));
  const Tensor w = upload(be, {C}, DType::f32, randoms(rng, static_cast<size_t>(C), 0.5f, 1.5f));
  const Tensor y = be.empty({R, C}, DType::f32), rstd = be.empty({R}, DType::f32);
  be.rms_norm_forward(x, w, y, rstd, 1e-6f);
  const Tensor dy =
      upload(be, {R, C}, DType::bf16, randoms(rng, static_cast<size_t>(R * C), -1, 1));
  const Tensor dx =
      upload(be, {R, C}, DType::bf16, randoms(rng, static_cast<size_t>(R * C), -1, 1));
  const std::vector<float> dx0 = floats_of(be, dx);
  be.arm(true);
  be.rms_norm_backward(x, w, rstd, dy, dx, be.zeros({C}, DType::f32), /*accumulate=*/true);
  be.arm(false);
  const probe::Rounding* inner = find(be, "rms_norm_backward (dy * weight)");
  const probe::Rounding* outer = find(be, "rms_norm_backward");
  ASSERT_NE(inner, nullptr);
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(inner->lowp, DType::bf16);
  expect_rounds_to(*outer, floats_of(be, dx), DType::bf16);
  // The recorded float is the old dx plus the f32 gradient.
  const Tensor t = be.empty({R, C}, DType::f32);
  be.rms_norm_backward(x, w, rstd, dy, t, Tensor{}, false);
  const std::vector<float> grad = floats_of(be, t);
  for (size_t i = 0; i < grad.size(); ++i) {
    ASSERT_EQ(float_bits(outer->pre[i]), float_bits(dx0[i] + grad[i])) << i;
  }
}

TEST(RoundingProbe, RopeBackwardRecordsTheBranchProductsAndForwardIsUnexpected) {
  RoundingProbe be(1);
  std::mt19937_64 rng(3);
  const int64_t n = 2, t = 5, hs = 8;
  const RopeTables tab = rope_tables(rope_inv_freq(hs, 10000.0, {}), t + 2);
  const Tensor cos = be.from_host({t + 2, hs / 2}, DType::f32, tab.cos.data());
  const Tensor sin = be.from_host({t + 2, hs / 2}, DType::f32, tab.sin.data());
  const Tensor dy =
      upload(be, {n, t, hs}, DType::f16, randoms(rng, static_cast<size_t>(n * t * hs), -2, 2));
  const Tensor dx = be.empty({n, t, hs}, DType::f16);
  be.arm(true);
  be.rope_backward(dy, cos, sin, dx, 2, DType::f16);
  const probe::Rounding* inner = find(be, "rope_backward (branches)");
  const probe::Rounding* outer = find(be, "rope_backward");
  ASSERT_NE(inner, nullptr);
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(inner->pre.size(), 2 * dx.numel());  // four products per pair
  expect_rounds_to(*outer, floats_of(be, dx), DType::f16);
  EXPECT_TRUE(be.unexpected().empty());
  be.rope_forward(dy, cos, sin, be.empty({n, t, hs}, DType::f16), 0);
  EXPECT_EQ(be.unexpected().size(), 1u);
}

}  // namespace
}  // namespace ampctl::nn
