// The closed list of models (nn/models.h): model.type picks the class by one switch, every type
// has one name and builds a model that reports it, the memory estimate names the built model's
// parameters, a value outside the list is refused, and modules take [..., features] inputs with
// the leading dimensions folded into rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/nn/models.h"
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

TEST(Models, BuildModelMakesTheSameModelAsItsClass) {
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

TEST(Models, TheEstimateNamesEveryParameterAsTheBuiltModelDoes) {
  auto be = make_cpu_backend(1);
  std::vector<ModelOptions> cases;
  for (bool ln : {false, true}) {
    for (double drop : {0.0, 0.25}) {
      ModelOptions o;
      o.type = nn::ModelType::mlp;
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
        o.type = nn::ModelType::cnn;
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
      o.type = nn::ModelType::gpt;
      o.in_features = o.out_features = 11, o.max_batch = 2;
      o.gpt = {2, 2, 8, 4, 0.0, bias, tie};
      cases.push_back(o);
    }
  }
  for (const ModelOptions& o : cases) {
    const std::unique_ptr<Model> m = build_model(*be, o);
    EXPECT_EQ(estimate_model_memory(o).parameter_names, layout_names(*m))
        << model_type_name(o.type) << " layer_norm " << o.mlp.layer_norm << " dropout "
        << o.mlp.dropout << " batch_norm " << o.cnn.batch_norm << " pool " << o.cnn.pool << " bias "
        << o.gpt.bias << " tie " << o.gpt.tie_embeddings;
  }
}

// Every type of the list has a distinct name, and the model built for it reports that type and
// that name (the names the config reads, model.type's values, are these).
TEST(Models, EveryTypeHasOneNameAndBuildsAModelOfThatType) {
  auto be = make_cpu_backend(1);
  std::vector<std::string> names;
  for (const auto& [type, name] : kModelTypeNames) {
    names.emplace_back(name);
    EXPECT_STREQ(model_type_name(type), name);
    ModelOptions o;
    o.type = type;
    o.in_features = 4, o.out_features = 4, o.max_batch = 2;  // the GPT: both its vocabulary
    o.mlp.hidden = {5};
    o.gpt = {1, 1, 4, 3, 0.0, true, true};
    o.cnn.channels = 1, o.cnn.height = 2, o.cnn.width = 2;
    o.cnn.conv = {{2, 1}};
    o.cnn.pool = 1;
    const std::unique_ptr<Model> m = build_model(*be, o);
    EXPECT_EQ(m->model_type(), type) << name;
    EXPECT_EQ(m->type(), name);
    EXPECT_GT(estimate_model_memory(o).parameters, 0) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mlp", "gpt", "cnn"}));
  EXPECT_STREQ(config::to_string(config::ModelType::gpt), "gpt");
}

// A model built directly by its class reports its own type, whatever options.type says.
TEST(Models, AModelReportsItsOwnType) {
  auto be = make_cpu_backend(1);
  ModelOptions o = options();
  o.type = ModelType::cnn;
  Mlp m(*be, o);
  EXPECT_EQ(m.model_type(), ModelType::mlp);
  EXPECT_EQ(m.type(), "mlp");
}

TEST(Models, ATypeOutsideTheListIsRefused) {
  auto be = make_cpu_backend(1);
  ModelOptions o = options();
  o.type = static_cast<ModelType>(7);
  try {
    build_model(*be, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("unknown model type 7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(estimate_model_memory(o), Error);
  EXPECT_STREQ(model_type_name(o.type), "?");
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
