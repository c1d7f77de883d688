// The model interface and its registry: model.type picks a builder (the MLP registers itself
// like any model would), an unknown type is a config error naming the known ones, another model
// type plugs in without touching anything else, and modules take [..., features] inputs with
// the leading dimensions folded into rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using config::Activation;
using config::LossType;
using config::Precision;
using ref::Vec;

ModelOptions options(Precision p = Precision::fp16, uint64_t seed = 5) {
  return train::model_options(ref::mlp({8, 6}, Activation::gelu, true, 0.25), p,
                              LossType::cross_entropy, 4, 3, 6, seed);
}

TEST(ModelRegistry, TheMlpIsRegisteredAndBuildsTheSameModelAsItsClass) {
  const std::vector<std::string> types = model_types();
  EXPECT_NE(std::find(types.begin(), types.end(), "mlp"), types.end());
  auto be = make_cpu_backend(1);
  const std::unique_ptr<Model> built = build_model(*be, options());
  ASSERT_NE(dynamic_cast<Mlp*>(built.get()), nullptr);
  EXPECT_EQ(built->type(), "mlp");
  Mlp direct(*be, options());
  EXPECT_EQ(ref::read_values(*be, built->params()), ref::read_values(*be, direct.params()));
  EXPECT_EQ(built->summary(), direct.summary());
  EXPECT_EQ(built->rng_state(), direct.rng_state());
  EXPECT_EQ(built->compute_dtype(), DType::f16);
  EXPECT_EQ(built->loss_kind(), LossKind::cross_entropy);
}

// The estimate's parameter names (what validate checks debug.inject_tensor against, nothing
// built) are the built model's layout names, in order, for every model and its variants.
std::vector<std::string> layout_names(const Model& m) {
  std::vector<std::string> names;
  for (const auto& e : m.layout().entries()) names.push_back(e.name);
  return names;
}

TEST(ModelRegistry, TheEstimateNamesEveryParameterAsTheBuiltModelDoes) {
  auto be = make_cpu_backend(1);
  std::vector<ModelOptions> cases;
  for (bool ln : {false, true}) {
    for (double drop : {0.0, 0.25}) {
      ModelOptions o;
      o.type = "mlp";
      o.in_features = 6, o.out_features = 3, o.max_batch = 4;
      o.mlp.hidden = {8, 5, 7};
      o.mlp.layer_norm = ln, o.mlp.dropout = drop;
      cases.push_back(o);
    }
  }
  for (bool bn : {false, true}) {
    for (int64_t pool : {1, 2}) {
      for (double drop : {0.0, 0.5}) {
        ModelOptions o;
        o.type = "cnn";
        o.cnn.channels = 1, o.cnn.height = 8, o.cnn.width = 8;
        o.in_features = 64, o.out_features = 4, o.max_batch = 2;
        o.cnn.conv = {{3, 3}, {4, 1}};
        o.cnn.pool = pool, o.cnn.batch_norm = bn, o.cnn.dropout = drop;
        o.cnn.hidden = {6, 5};
        cases.push_back(o);
      }
    }
  }
  for (bool bias : {false, true}) {
    for (bool tie : {false, true}) {
      ModelOptions o;
      o.type = "gpt";
      o.in_features = o.out_features = 11, o.max_batch = 2;
      o.gpt = {2, 2, 8, 4, 0.0, bias, tie};
      cases.push_back(o);
    }
  }
  for (const ModelOptions& o : cases) {
    const std::unique_ptr<Model> m = build_model(*be, o);
    EXPECT_EQ(estimate_model_memory(o).parameter_names, layout_names(*m))
        << o.type << " layer_norm " << o.mlp.layer_norm << " dropout " << o.mlp.dropout
        << " batch_norm " << o.cnn.batch_norm << " pool " << o.cnn.pool << " bias " << o.gpt.bias
        << " tie " << o.gpt.tie_embeddings;
  }
}

TEST(ModelRegistry, AnUnknownTypeIsAConfigErrorNamingTheKnownOnes) {
  auto be = make_cpu_backend(1);
  ModelOptions o = options();
  o.type = "transformer";
  try {
    build_model(*be, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("model.type"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'transformer'"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("mlp"), std::string::npos) << e.hint();
  }
}

// A model type the library does not know: one bias per output, logits = bias (it ignores its
// input). Enough to show that a new type needs only its class and a registration.
class BiasOnly final : public Model {
 public:
  BiasOnly(Backend& b, const ModelOptions& o) : Model(b, o), m_loss(o.loss, o.out_features) {
    m_layout.add("bias", {m_out});
    allocate_params([](std::span<float> host) {
      for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i);
    });
    m_loss.setup(b, m_max_batch, m_act);
    m_logits = RowViews(b.zeros({m_max_batch, m_out}, m_act));
  }
  std::string type() const override { return "bias_only"; }
  std::string summary() const override { return "bias [" + std::to_string(m_out) + "]\n"; }
  const Tensor& forward(const Tensor&, int64_t batch, bool) override {
    const Tensor& y = m_logits.rows(batch);
    for (int64_t r = 0; r < batch; ++r) {
      m_backend->copy(y.view(static_cast<size_t>(r * m_out), {m_out}), params().view(0, {m_out}));
    }
    m_batch = batch;
    return y;
  }
  void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out, const Tensor& correct,
            const Tensor& scale) override {
    m_loss.forward(m_logits.rows(batch), targets, batch, loss_out, correct, scale);
  }
  void backward(int64_t) override {}
  nlohmann::json rng_state() const override { return nlohmann::json::object(); }
  void set_rng_state(const nlohmann::json&) override {}

 private:
  Loss m_loss;
  RowViews m_logits;
  int64_t m_batch = 0;
};

TEST(ModelRegistry, ANewTypeRegistersAndBuildsThroughTheSameCall) {
  // Its estimate: one bias (aligned as the arena lays it out) and f32 logits of max_batch rows.
  register_model(
      "bias_only",
      [](Backend& b, const ModelOptions& o) { return std::make_unique<BiasOnly>(b, o); },
      [](const ModelOptions& o, const Backend*) {
        ModelMemory m;
        m.parameters = arena_aligned(o.out_features, "bias");
        m.activation_bytes = o.max_batch * o.out_features * 4;
        return m;
      });
  const std::vector<std::string> types = model_types();
  EXPECT_NE(std::find(types.begin(), types.end(), "bias_only"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "mlp"), types.end());
  auto be = make_cpu_backend(1);
  ModelOptions o = options(Precision::fp32);
  o.type = "bias_only";
  const std::unique_ptr<Model> m = build_model(*be, o);
  EXPECT_EQ(m->type(), "bias_only");
  EXPECT_EQ(m->num_params(), 3);
  EXPECT_EQ(m->state_tensors().at(0).first, "bias");
  o.max_batch = 5;
  const ModelMemory estimate = estimate_model_memory(o);  // the second entry, beside the builder
  EXPECT_EQ(estimate.parameters, 16);                     // 3 elements on a 16-element boundary
  EXPECT_EQ(estimate.activation_bytes, 5 * 3 * 4);
  const ref::Batch batch = ref::make_batch(2, 4, 3, LossType::cross_entropy, 1);
  const ref::DeviceBatch d = ref::upload(*be, batch, 4, 3);
  EXPECT_EQ(ref::read_values(*be, m->forward(d.x, 2, false)), (Vec{0, 0.5, 1, 0, 0.5, 1}));
}

TEST(ModelShapes, LeadingDimensionsFoldIntoRows) {
  auto be = make_cpu_backend(1);
  // 6 rows as [6, 4] and as [2, 3, 4]: the same logits, bit for bit, in training mode too (the
  // dropout masks are drawn per row in the same order).
  Mlp flat(*be, options(Precision::bf16, 9));
  Mlp folded(*be, options(Precision::bf16, 9));
  const ref::Batch batch = ref::make_batch(6, 4, 3, LossType::cross_entropy, 2);
  const ref::DeviceBatch d = ref::upload(*be, batch, 4, 3);
  const Tensor x3 = d.x.view(0, {2, 3, 4});
  for (bool training : {false, true}) {
    const Vec a = ref::read_values(*be, flat.forward(d.x, 6, training));
    const Vec b = ref::read_values(*be, folded.forward(x3, 6, training));
    EXPECT_EQ(a, b) << (training ? "training" : "eval");
  }
  const Tensor f = fold_rows(x3, 4);
  EXPECT_EQ(f.shape(), (Shape{6, 4}));
  EXPECT_EQ(f.data(), d.x.data());
  EXPECT_EQ(fold_rows(x3, 5).shape(), x3.shape());  // not [..., 5]: left for the checks to name
  EXPECT_EQ(fold_rows(d.x, 4).shape(), d.x.shape());
  // A folded input whose rows do not cover the batch is refused as before.
  EXPECT_THROW(flat.forward(d.x.view(0, {1, 2, 4}), 6, false), Error);
}

}  // namespace
}  // namespace ampctl::nn
