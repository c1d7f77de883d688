// No heap allocation inside a step (docs/design.md): after a warm-up call for each batch size,
// forward, loss, backward and zero_grad allocate nothing. Counted with replacements of the global
// operator new (this test directory is its own binary, so the replacement affects only it);
// counting is switched on only around the measured calls.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "alloc_counter.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/nn/numerics.h"
#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using ampctl::testing::g_allocations;
using ampctl::testing::g_counting;

using config::Activation;
using config::LossType;
using config::Precision;

struct AllocCase {
  const char* name;
  Precision precision;
  config::ModelConfig model;
  LossType loss;
};

void PrintTo(const AllocCase& c, std::ostream* os) {
  *os << c.name;
}

class NoAllocation : public ::testing::TestWithParam<AllocCase> {};

TEST_P(NoAllocation, StepAllocatesNothingAfterTheFirstCallPerBatchSize) {
  const AllocCase& c = GetParam();
  auto be = make_cpu_backend(1);
  const int64_t in = 12, out = 5, max_batch = 16;
  TestMlp model(*be, c.model, c.precision, c.loss, in, out, max_batch, 3);
  // The loader's buffers: max_batch rows, of which a partial last batch uses the first ones.
  const ref::Batch batch = ref::make_batch(max_batch, in, out, c.loss, 4);
  const ref::DeviceBatch d = ref::upload(*be, batch, in, out);
  Tensor loss = be->zeros({1}, DType::f32);
  Tensor scale = be->zeros({1}, DType::f32);
  be->fill(scale, 256.0);
  Tensor correct;
  if (c.loss == LossType::cross_entropy) correct = be->zeros({1}, DType::i32);

  auto iteration = [&](int64_t rows) {
    model.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {  // gradient accumulation
      model.forward(d.x, rows, /*training=*/true);
      model.loss(d.targets, rows, loss, Tensor{}, scale);
      model.backward(rows);
    }
    model.forward(d.x, rows, /*training=*/false);  // evaluation
    model.loss(d.targets, rows, loss, correct, Tensor{});
  };
  const int64_t sizes[] = {max_batch, 11, 16, 11, 3};
  for (int64_t rows : sizes) iteration(rows);  // warm-up: every size once

  g_allocations = 0;
  g_counting = true;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (int64_t rows : sizes) iteration(rows);
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u) << "heap allocations inside steady-state steps";
  EXPECT_TRUE(std::isfinite(be->read_scalar_f32(loss)));

  // The counter works: a fresh tensor allocates its storage.
  g_allocations = 0;
  g_counting = true;
  const Tensor v = be->empty({3}, DType::f32);
  g_counting = false;
  EXPECT_GT(g_allocations.load(), 0u);
}

// The GPT: training micro-batches, evaluation, a shorter context (sampling) and a partial batch,
// each warmed up once, then allocation-free.
TEST(NoAllocationGpt, StepAllocatesNothingAfterTheFirstCallPerShape) {
  // f16 also with the gradient-numerics hook active (nn/numerics.h: counted steps and
  // grad_amax-only steps), on both attention paths (dropout: the materialised ops).
  struct GptCase {
    DType dt;
    double dropout;
    bool numerics;
  };
  for (const GptCase& c : {GptCase{DType::f16, 0.1, false}, GptCase{DType::f32, 0.1, false},
                           GptCase{DType::f16, 0.1, true}, GptCase{DType::f16, 0.0, true}}) {
    const DType dt = c.dt;
    auto be = make_cpu_backend(1);
    ModelOptions o;
    o.type = nn::ModelType::gpt;
    o.compute = dt;
    o.in_features = o.out_features = 11;
    o.max_batch = 3;
    o.seed = 2;
    o.gpt = {2, 2, 16, 8, c.dropout, true, true};
    o.numerics = c.numerics;
    Gpt model(*be, o);
    GradNumerics* numerics = model.numerics();
    ASSERT_EQ(numerics != nullptr, c.numerics);
    std::vector<int32_t> ids(3 * 8);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 11);
    const Tensor x = be->from_host({3, 8}, DType::i32, ids.data());
    const Tensor x5 = be->from_host({3, 5}, DType::i32, ids.data());
    const Tensor y = be->from_host({24}, DType::i32, ids.data());
    Tensor loss = be->zeros({1}, DType::f32);
    Tensor scale = be->zeros({1}, DType::f32);
    be->fill(scale, 64.0);
    auto iteration = [&](int64_t rows) {
      model.zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        if (numerics) numerics->begin(/*count=*/micro == 0);
        model.forward(x, rows, true);
        model.loss(y, rows, loss, Tensor{}, scale);
        model.backward(rows);
        if (numerics) numerics->end();
      }
      model.forward(x, rows, false);
      model.loss(y, rows, loss, Tensor{}, Tensor{});
      model.forward(x5, 1, false);
    };
    for (int64_t rows : {3, 2}) iteration(rows);
    g_allocations = 0;
    g_counting = true;
    for (int repeat = 0; repeat < 2; ++repeat) {
      for (int64_t rows : {3, 2}) iteration(rows);
    }
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0u)
        << dtype_name(dt) << (c.numerics ? " numerics" : "") << " dropout " << c.dropout;
    EXPECT_TRUE(std::isfinite(be->read_scalar_f32(loss)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Model, NoAllocation,
    ::testing::Values(AllocCase{"fp16_gelu_layernorm_dropout_ce", Precision::fp16,
                                ref::mlp({32, 24}, Activation::gelu, true, 0.1),
                                LossType::cross_entropy},
                      AllocCase{"bf16_tanh_mse", Precision::bf16, ref::mlp({32}, Activation::tanh),
                                LossType::mse},
                      AllocCase{"fp32_relu_dropout_ce", Precision::fp32,
                                ref::mlp({32, 24}, Activation::relu, false, 0.3),
                                LossType::cross_entropy}),
    [](const ::testing::TestParamInfo<AllocCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ampctl::nn
