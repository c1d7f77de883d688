// Issue 47, class 6: the structure a weights file records against the model it loads into
// (train::structure_mismatch), for every model type: the keys that change the function with the
// same tensor shapes are compared, the adapted or training-only ones are not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "ampctl/config/run_config.h"
#include "ampctl/train/init_from.h"

namespace ampctl::train {
namespace {

// The model section of a valid configuration with this model (data of the kind it takes).
nlohmann::json model_of(const std::string& model_yaml) {
  std::string data =
      "{train: {source: synthetic, task: classification, samples: 64, features: "
      "8, classes: 2}, batch_size: 8}";
  if (model_yaml.find("type: gpt") != std::string::npos) {
    data = "{train: {source: text, path: t.txt}}";
  } else if (model_yaml.find("type: cnn") != std::string::npos) {
    data = "{train: {source: idx, images: i.idx, labels: l.idx}}";
  }
  const std::string yaml = "model: " + model_yaml + "\ndata: " + data + "\n";
  return config::to_json(config::parse_config(yaml, "m.yaml")).at("model");
}

TEST(InitStructure, EveryFunctionChangingKeyOfEveryModelTypeIsCompared) {
  struct Case {
    const char* recorded;
    const char* model;
    const char* key;  // "" = they agree
  };
  const Case cases[] = {
      {"{type: gpt, n_head: 2, n_embd: 16}", "{type: gpt, n_head: 4, n_embd: 16}", "n_head"},
      {"{type: gpt, n_layer: 2}", "{type: gpt, n_layer: 3}", "n_layer"},
      {"{type: mlp, activation: relu}", "{type: mlp, activation: gelu}", "activation"},
      {"{type: mlp, layer_norm: true}", "{type: mlp}", "layer_norm"},
      {"{type: mlp, hidden: [8]}", "{type: mlp, hidden: [16]}", "hidden"},
      {"{type: cnn, pool: 2}", "{type: cnn, pool: 1}", "pool"},
      {"{type: cnn, activation: tanh}", "{type: cnn}", "activation"},
      {"{type: cnn, batch_norm: true}", "{type: cnn}", "batch_norm"},
      {"{type: cnn, conv: [[4, 3]]}", "{type: cnn, conv: [[4, 5]]}", "conv"},
      // Not compared: dropout (training only), what the matching adapts (block_size, a tied
      // head, biases), and another model type (it shares no tensor: refused by the matching).
      {"{type: gpt, dropout: 0.1}", "{type: gpt}", ""},
      {"{type: gpt, block_size: 64}", "{type: gpt, block_size: 16}", ""},
      {"{type: gpt, tie_embeddings: false, bias: false}", "{type: gpt}", ""},
      {"{type: mlp}", "{type: gpt}", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.recorded) + " into " + c.model);
    const std::string m = structure_mismatch(model_of(c.recorded), model_of(c.model), "FILE");
    if (*c.key == '\0') {
      EXPECT_EQ(m, "");
    } else {
      EXPECT_EQ(m.rfind("FILE records model." + std::string(c.key) + ": ", 0), 0u) << m;
      EXPECT_NE(m.find("and the model has model." + std::string(c.key) + ": "), std::string::npos)
          << m;
    }
  }
  // A source that records nothing (an older export) has nothing to compare.
  EXPECT_EQ(structure_mismatch(nullptr, model_of("{type: gpt}"), "FILE"), "");
}

}  // namespace
}  // namespace ampctl::train
