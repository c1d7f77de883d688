// Model: initialisation, parameter layout and names, RNG state, views for smaller batches, and
// the errors of its API.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using config::Activation;
using config::LossType;
using config::Precision;
using ref::Vec;

// A weight tensor of n draws from U(-b, b): every value within float(b), and the sample mean
// and variance within 5 standard deviations of their expectations. For U(-b, b): mean 0,
// variance b^2/3, fourth central moment b^4/5, so sd(mean) = b / sqrt(3n) and
// sd(sample variance) = sqrt((b^4/5 - b^4/9) / n) = b^2 sqrt(4 / (45 n)).
void expect_uniform(const std::string& name, const Vec& v, double b) {
  const auto n = static_cast<double>(v.size());
  const double bf = static_cast<float>(b);
  double sum = 0.0;
  for (double x : v) {
    ASSERT_LE(std::abs(x), bf) << name << ": " << x << " outside U(-" << b << ", " << b << ")";
    sum += x;
  }
  const double mean = sum / n;
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double var = ss / (n - 1.0);
  EXPECT_LE(std::abs(mean), 5.0 * b / std::sqrt(3.0 * n)) << name;
  EXPECT_LE(std::abs(var - b * b / 3.0), 5.0 * b * b * std::sqrt(4.0 / (45.0 * n)))
      << name << ": variance " << var << ", expected " << b * b / 3.0;
}

TEST(ModelInit, LinearIsPyTorchDefaultUniformAndLayerNormIsOnesAndZeros) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({128, 64}, Activation::relu, /*layer_norm=*/true);
  TestMlp model(*be, cfg, Precision::fp16, LossType::cross_entropy, 256, 10, 4, 2024);
  const auto p = ref::read_named(model, model.params());
  // fan_in of each Linear: 256, 128, 64.
  const std::map<std::string, double> fan_in = {
      {"layers.0", 256}, {"layers.3", 128}, {"layers.6", 64}};
  for (const auto& [prefix, fi] : fan_in) {
    expect_uniform(prefix + ".weight", p.at(prefix + ".weight"), 1.0 / std::sqrt(fi));
    expect_uniform(prefix + ".bias", p.at(prefix + ".bias"), 1.0 / std::sqrt(fi));
  }
  for (const char* ln : {"layers.1", "layers.4"}) {
    for (double g : p.at(std::string(ln) + ".weight")) ASSERT_EQ(g, 1.0);
    for (double b : p.at(std::string(ln) + ".bias")) ASSERT_EQ(b, 0.0);
  }
  // The lowp copy is the masters rounded once to fp16.
  const Vec masters = ref::read_values(*be, model.params());
  const Vec lowp = ref::read_values(*be, model.lowp_params());
  for (size_t i = 0; i < masters.size(); ++i) {
    ASSERT_EQ(lowp[i], round_to_half(static_cast<float>(masters[i]))) << i;
  }
}

TEST(ModelInit, SameSeedSameBitsOnAnyPrecisionAndAnotherSeedDiffers) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({32}, Activation::gelu, false, 0.5);
  auto params = [&](Precision p, uint64_t seed) {
    TestMlp m(*be, cfg, p, LossType::cross_entropy, 16, 4, 2, seed);
    return ref::read_values(*be, m.params());
  };
  const Vec a = params(Precision::fp16, 9);
  EXPECT_EQ(a, params(Precision::fp16, 9));
  EXPECT_EQ(a, params(Precision::fp32, 9));
  EXPECT_EQ(a, params(Precision::bf16, 9));
  const Vec c = params(Precision::fp16, 10);
  size_t same = 0, nonzero = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    nonzero += a[i] != 0.0;
    same += a[i] != 0.0 && a[i] == c[i];
  }
  // Distinct seeds share a 24-bit uniform with probability 2^-24 per element.
  EXPECT_GT(nonzero, 600u);
  EXPECT_LE(same, 1u);
}

TEST(ModelLayout, NamesAndShapesFollowPyTorchSequential) {
  // torch: nn.Sequential(Linear(3,5), LayerNorm(5), ReLU(), Dropout(0.1), Linear(5,7),
  // LayerNorm(7), ReLU(), Dropout(0.1), Linear(7,4)) held as `layers`.
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({5, 7}, Activation::relu, true, 0.1);
  TestMlp model(*be, cfg, Precision::fp16, LossType::cross_entropy, 3, 4, 2, 0);
  const std::vector<std::pair<std::string, Shape>> want = {
      {"layers.0.weight", {5, 3}}, {"layers.0.bias", {5}},      {"layers.1.weight", {5}},
      {"layers.1.bias", {5}},      {"layers.4.weight", {7, 5}}, {"layers.4.bias", {7}},
      {"layers.5.weight", {7}},    {"layers.5.bias", {7}},      {"layers.8.weight", {4, 7}},
      {"layers.8.bias", {4}}};
  const auto& entries = model.layout().entries();
  ASSERT_EQ(entries.size(), want.size());
  int64_t count = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(entries[i].name, want[i].first);
    EXPECT_EQ(entries[i].shape, want[i].second) << entries[i].name;
    EXPECT_EQ(entries[i].offset % FlatLayout::kAlignElements, 0u);
    count += shape_numel(want[i].second);
  }
  // sum(p.numel() for p in model.parameters())
  EXPECT_EQ(count, 5 * 3 + 5 + 5 + 5 + 7 * 5 + 7 + 7 + 7 + 4 * 7 + 4);
  EXPECT_EQ(model.num_params(), count);
  EXPECT_EQ(model.params().numel(), model.layout().total());
  EXPECT_EQ(model.grads().numel(), model.layout().total());
  EXPECT_EQ(model.lowp_params().dtype(), DType::f16);
  EXPECT_EQ(model.lowp_params().numel(), model.layout().total());

  const auto named = model.state_tensors();
  ASSERT_EQ(named.size(), want.size());
  EXPECT_EQ(named[4].first, "layers.4.weight");
  EXPECT_EQ(named[4].second.shape(), (Shape{7, 5}));
  EXPECT_EQ(named[4].second.dtype(), DType::f32);
  EXPECT_TRUE(named[4].second.shares_storage_with(model.params()));

  const auto groups = model.param_groups(0.5f);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_TRUE(groups[0].params.shares_storage_with(model.params()));
  EXPECT_TRUE(groups[0].grads.shares_storage_with(model.grads()));
  EXPECT_TRUE(groups[0].lowp_params.shares_storage_with(model.lowp_params()));
  EXPECT_EQ(groups[0].lr, 0.5f);

  const std::string s = model.summary();
  EXPECT_NE(s.find("layers.0  Linear(in_features=3, out_features=5, bias=True)  weight [5, 3], "
                   "bias [5]  params 20"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("layers.3  Dropout(p=0.1, inplace=False)  params 0"), std::string::npos) << s;
  EXPECT_NE(s.find("layers.5  LayerNorm((7,), eps=1e-05, elementwise_affine=True)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("total params " + std::to_string(count)), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 10);  // nine layers and the total
}

TEST(ModelLayout, WithoutLayerNormOrDropoutLinearsAreEveryOtherLayer) {
  auto be = make_cpu_backend(1);
  TestMlp model(*be, ref::mlp({5, 7}, Activation::tanh), Precision::fp32, LossType::mse, 3, 2, 2,
                0);
  std::vector<std::string> names;
  for (const auto& e : model.layout().entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                             "layers.2.bias", "layers.4.weight", "layers.4.bias"}));
  EXPECT_FALSE(model.lowp_params().defined());
  EXPECT_FALSE(model.param_groups(1e-3f)[0].lowp_params.defined());
}

Vec logits_of(Mlp& m, const ref::Batch& b, bool training, int64_t extra_rows = 0) {
  const ref::DeviceBatch d =
      ref::upload(m.backend(), b, m.in_features(), m.out_features(), extra_rows);
  return ref::read_values(m.backend(), m.forward(d.x, b.rows, training));
}

TEST(ModelRng, DropoutAdvancesPerTrainingCallAndTheStateReplays) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({16, 16}, Activation::relu, false, 0.5);
  TestMlp model(*be, cfg, Precision::fp16, LossType::cross_entropy, 8, 3, 4, 42);
  const ref::Batch batch = ref::make_batch(4, 8, 3, LossType::cross_entropy, 1);
  EXPECT_EQ(model.rng_state(), (nlohmann::json{{"seed", 42}, {"dropout_offset", 0}}));
  const Vec first = logits_of(model, batch, true);
  EXPECT_EQ(model.dropout_calls(), 2u);  // two Dropout modules
  const nlohmann::json saved = model.rng_state();
  const Vec second = logits_of(model, batch, true);
  EXPECT_EQ(model.dropout_calls(), 4u);
  EXPECT_NE(first, second);  // new masks
  logits_of(model, batch, false);
  EXPECT_EQ(model.dropout_calls(), 4u);  // eval draws nothing
  model.set_rng_state(saved);
  EXPECT_EQ(logits_of(model, batch, true), second);

  EXPECT_THROW(model.set_rng_state(nlohmann::json{{"seed", 1}}), Error);
  EXPECT_THROW(model.set_rng_state(nlohmann::json{{"seed", -1}, {"dropout_offset", 0}}), Error);
  try {
    model.set_rng_state(nlohmann::json::array());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
  }
}

TEST(ModelRng, EvalDropoutIsTheIdentity) {
  // Dropout has no parameters, so both models draw the same initial values (same layout
  // entries, same streams); in eval they must compute the same function, bit for bit.
  auto be = make_cpu_backend(1);
  TestMlp with(*be, ref::mlp({16, 16}, Activation::gelu, true, 0.3), Precision::bf16,
               LossType::cross_entropy, 8, 3, 4, 42);
  TestMlp without(*be, ref::mlp({16, 16}, Activation::gelu, true), Precision::bf16,
                  LossType::cross_entropy, 8, 3, 4, 42);
  EXPECT_EQ(ref::read_values(*be, with.params()), ref::read_values(*be, without.params()));
  const ref::Batch batch = ref::make_batch(4, 8, 3, LossType::cross_entropy, 2);
  EXPECT_EQ(logits_of(with, batch, false), logits_of(without, batch, false));
  EXPECT_NE(logits_of(with, batch, true), logits_of(without, batch, true));
}

TEST(ModelViews, ASmallerBatchComputesWhatAModelSizedForItComputes) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({16}, Activation::relu, true, 0.2);
  TestMlp big(*be, cfg, Precision::fp16, LossType::cross_entropy, 8, 3, 32, 7);
  TestMlp exact(*be, cfg, Precision::fp16, LossType::cross_entropy, 8, 3, 5, 7);
  const ref::Batch batch = ref::make_batch(5, 8, 3, LossType::cross_entropy, 3);
  // big reads the first 5 rows of a 32-row buffer; exact gets a 5-row tensor.
  EXPECT_EQ(logits_of(big, batch, true, 27), logits_of(exact, batch, true));
  // Batch sizes change freely (more distinct sizes than the view cache holds).
  for (int64_t rows : {1, 2, 3, 4, 5, 32, 5}) {
    const ref::Batch b = ref::make_batch(rows, 8, 3, LossType::cross_entropy, 4);
    const Vec l = logits_of(big, b, false, 32 - rows);
    EXPECT_EQ(l.size(), static_cast<size_t>(rows * 3));
  }
}

TEST(ModelErrors, BadArgumentsAndOrderAreReported) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({4}, Activation::relu);
  TestMlp model(*be, cfg, Precision::fp16, LossType::cross_entropy, 3, 2, 4, 0);
  Tensor x = be->zeros({4, 3}, DType::f32);
  Tensor labels = be->zeros({4}, DType::i32);
  Tensor loss = be->zeros({1}, DType::f32);
  Tensor scale = be->zeros({1}, DType::f32);
  be->fill(scale, 1.0);
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::runtime;  // "did not throw"
  };
  EXPECT_EQ(kind_of([&] { model.backward(4); }), ErrorKind::state);
  EXPECT_EQ(kind_of([&] { model.forward(x, 5, true); }), ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { model.forward(x, 0, true); }), ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] {
              model.forward(be->zeros({4, 2}, DType::f32), 4, true);
            }),
            ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] {
              model.forward(be->zeros({4, 3}, DType::f16), 4, true);
            }),
            ErrorKind::invalid_argument);
  model.forward(x, 4, true);
  EXPECT_EQ(kind_of([&] { model.loss(labels, 3, loss, Tensor{}, scale); }), ErrorKind::state);
  EXPECT_EQ(kind_of([&] { model.loss(be->zeros({4}, DType::f32), 4, loss, Tensor{}, scale); }),
            ErrorKind::invalid_argument);
  model.loss(labels, 4, loss, Tensor{}, Tensor{});  // no seed
  EXPECT_EQ(kind_of([&] { model.backward(4); }), ErrorKind::state);
  model.loss(labels, 4, loss, Tensor{}, scale);
  model.backward(4);
  EXPECT_EQ(kind_of([&] { model.backward(4); }), ErrorKind::state);  // once per loss

  config::ModelConfig bad = cfg;
  bad.dropout = 1.0;
  EXPECT_EQ(
      kind_of([&] { TestMlp m(*be, bad, Precision::fp16, LossType::cross_entropy, 3, 2, 4, 0); }),
      ErrorKind::invalid_argument);
  bad = cfg;
  bad.hidden = {4, 0};
  EXPECT_EQ(
      kind_of([&] { TestMlp m(*be, bad, Precision::fp16, LossType::cross_entropy, 3, 2, 4, 0); }),
      ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { TestMlp m(*be, cfg, Precision::fp16, LossType::mse, 3, 2, 0, 0); }),
            ErrorKind::invalid_argument);
}

TEST(ModelLoss, CorrectCountsArgmaxHitsAndMseTakesTargets) {
  auto be = make_cpu_backend(1);
  TestMlp model(*be, ref::mlp({8}, Activation::relu), Precision::fp32, LossType::cross_entropy, 4,
                3, 6, 1);
  const ref::Batch batch = ref::make_batch(6, 4, 3, LossType::cross_entropy, 8);
  const ref::DeviceBatch d = ref::upload(*be, batch, 4, 3);
  const Vec logits = ref::read_values(*be, model.forward(d.x, 6, false));
  Tensor loss = be->zeros({1}, DType::f32), correct = be->zeros({1}, DType::i32);
  model.loss(d.targets, 6, loss, correct, Tensor{});
  int32_t hits = 0;
  for (int64_t r = 0; r < 6; ++r) {
    const auto* row = &logits[static_cast<size_t>(r * 3)];
    const auto arg = std::max_element(row, row + 3) - row;
    hits += arg == batch.labels[static_cast<size_t>(r)];
  }
  EXPECT_EQ(be->read_scalar_i32(correct), hits);

  TestMlp reg(*be, ref::mlp({8}, Activation::relu), Precision::fp32, LossType::mse, 4, 3, 6, 1);
  const ref::Batch rb = ref::make_batch(6, 4, 3, LossType::mse, 8);
  const ref::DeviceBatch rd = ref::upload(*be, rb, 4, 3, /*extra_rows=*/1);
  reg.forward(rd.x, 6, false);
  reg.loss(rd.targets, 6, loss, Tensor{}, Tensor{});
  EXPECT_THROW(reg.loss(rd.targets, 6, loss, correct, Tensor{}), Error);  // no argmax for mse
  EXPECT_GT(be->read_scalar_f32(loss), 0.0f);
}

}  // namespace
}  // namespace ampctl::nn
