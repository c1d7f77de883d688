// The GPT's keys (model.type: gpt, docs/reference.md "The GPT") and optimizer.decay_on: their
// defaults (nanoGPT's GPTConfig), ranges, the n_head | n_embd rule, and the mlp-only keys refused
// under gpt (and the gpt keys under mlp) unless at their defaults, as every key of another choice.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::only_problem;

TEST(GptKeys, DefaultsAreNanoGptsAndParse) {
  const RunConfig c = parse_config(
      "model: {type: gpt}\ndata: {train: {source: text, path: corpus.txt}}\n", "run.yaml");
  EXPECT_EQ(c.model.type, ModelType::gpt);
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.n_embd, 768);
  EXPECT_EQ(c.model.block_size, 1024);
  EXPECT_TRUE(c.model.bias);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.dropout, 0.0);
  EXPECT_EQ(c.optimizer.decay_on, DecayOn::all);
  const RunConfig d = parse_config(
      "model: {type: gpt, n_layer: 4, n_head: 4, n_embd: 128, block_size: 64, dropout: 0.1, "
      "bias: false, tie_embeddings: false}\ndata: {train: {source: text, path: "
      "corpus.txt}}\noptimizer: {decay_on: matrices}\n",
      "run.yaml");
  EXPECT_EQ(d.model.n_layer, 4);
  EXPECT_EQ(d.model.n_embd, 128);
  EXPECT_EQ(d.model.block_size, 64);
  EXPECT_FALSE(d.model.bias);
  EXPECT_FALSE(d.model.tie_embeddings);
  EXPECT_EQ(d.optimizer.decay_on, DecayOn::matrices);
  // The JSON form (checkpoints) round-trips.
  EXPECT_EQ(from_json(to_json(d)), d);
}

TEST(GptKeys, NHeadMustDivideNEmbd) {
  const Problem p = only_problem(
      "model: {type: gpt, n_head: 5, n_embd: 128}\ndata: {train: {source: text, path: "
      "corpus.txt}}\n");
  EXPECT_EQ(p.key, "model.n_head");
  EXPECT_NE(p.message.find("must divide model.n_embd (128), got 5"), std::string::npos) << p.str();
  EXPECT_EQ(p.where.line, 1) << p.str();
}

TEST(GptKeys, RangesNameTheKeyAndItsPlace) {
  const Problem p = only_problem(
      "model:\n  type: gpt\n  n_layer: 0\ndata: {train: {source: text, path: corpus.txt}}\n");
  EXPECT_EQ(p.key, "model.n_layer");
  EXPECT_EQ(p.where.line, 3) << p.str();
  EXPECT_GT(p.where.column, 0) << p.str();
  EXPECT_EQ(
      only_problem(
          std::string("model: {type: gpt}\ndata: {train: {source: text, path: corpus.txt}}\n"),
          {"model.block_size=0"})
          .key,
      "model.block_size");
  EXPECT_EQ(only_problem("model: {}\ndata: {}\noptimizer: {decay_on: vectors}\n").key,
            "optimizer.decay_on");
}

TEST(GptKeys, KeysOfTheOtherModelAreRefusedUnlessAtTheirDefaults) {
  // mlp keys under gpt
  Problem p = only_problem(
      "model: {type: gpt, hidden: [64]}\ndata: {train: {source: text, path: corpus.txt}}\n");
  EXPECT_EQ(p.key, "model.hidden") << p.str();
  p = only_problem(
      "model: {type: gpt, layer_norm: true}\ndata: {train: {source: text, path: corpus.txt}}\n");
  EXPECT_EQ(p.key, "model.layer_norm") << p.str();
  // gpt keys under mlp
  p = only_problem("model: {type: mlp, n_layer: 2}\ndata: {}\n");
  EXPECT_EQ(p.key, "model.n_layer") << p.str();
  // at their defaults they are accepted (a listing of every key stays valid), and left out of
  // the resolved dump
  const RunConfig c = parse_config(
      "model: {type: gpt, hidden: [256, 256], activation: relu}\ndata: {train: {source: text, "
      "path: corpus.txt}}\n",
      "r.yaml");
  const std::string dump = to_yaml(c);
  EXPECT_EQ(dump.find("hidden"), std::string::npos);
  EXPECT_NE(dump.find("n_embd"), std::string::npos);
}

TEST(GptKeys, AModelAndItsDataMustBeOfOneKind) {
  // A GPT on rows of features (the default synthetic source, or an image set) is refused at
  // validation, before a run directory exists, not at its first step.
  Problem p = only_problem("model: {type: gpt}\ndata: {}\n");
  EXPECT_EQ(p.key, "model.type") << p.str();
  EXPECT_NE(p.message.find("gpt takes token windows, and data.train is a synthetic source"),
            std::string::npos)
      << p.str();
  p = only_problem("model: {type: gpt}\ndata: {train: {source: fashion_mnist}}\n");
  EXPECT_NE(p.message.find("is a fashion_mnist source"), std::string::npos) << p.str();
  // and token windows need a GPT, whichever other model is asked for
  for (const char* type : {"mlp", "cnn"}) {
    p = only_problem(std::string("model: {type: ") + type +
                     "}\ndata: {train: {source: text, path: corpus.txt}}\n");
    EXPECT_EQ(p.key, "model.type") << p.str();
    EXPECT_NE(p.message.find("needs a language model (model.type: gpt)"), std::string::npos)
        << p.str();
  }
}

}  // namespace
}  // namespace ampctl::config
