// The memory estimate of a GPT: its parameter count is the model's arena and its activations are
// the buffers the model allocates (both counted by building the model, on the CPU backend; the
// CUDA test does the same with the fused attention's sizes), and a GPT too large for the host
// is refused naming a GPT key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/train/build.h"
#include "ampctl/train/memory_plan.h"

namespace ampctl::train {
namespace {

config::RunConfig gpt_config(const std::vector<std::string>& sets) {
  return config::parse_config(
      "model: {type: gpt}\ndata: {train: {source: text, path: corpus.txt}}\n", "x.yaml", sets);
}

TEST(GptMemoryPlan, ParametersAndActivationsAreWhatTheModelAllocates) {
  auto be = make_cpu_backend(1);
  for (const char* bias : {"model.bias=true", "model.bias=false"}) {
    for (const char* tie : {"model.tie_embeddings=true", "model.tie_embeddings=false"}) {
      for (const char* precision : {"precision=fp16", "precision=bf16", "precision=fp32"}) {
        for (const char* dropout : {"model.dropout=0", "model.dropout=0.1"}) {
          const std::string what = std::string(bias) + " " + tie + " " + precision + " " + dropout;
          const config::RunConfig c = gpt_config(
              {"model.n_layer=2", "model.n_head=2", "model.n_embd=24", "model.block_size=16",
               "data.batch_size=3", bias, tie, precision, dropout});
          const int64_t vocab = 37;
          const DataShape shape{1, vocab, 1000, 100, true};
          const MemoryPlan p = plan_memory(c, shape, be.get());
          const nn::ModelOptions o =
              model_options(c.model, c.precision, c.loss, 1, vocab, c.data.batch_size, 0);
          nn::Gpt m(*be, o);
          const auto total = static_cast<int64_t>(m.layout().total());
          EXPECT_EQ(p.parameter_count, (total + 15) / 16 * 16) << what;
          EXPECT_EQ(p.parameters, 4u * static_cast<uint64_t>(p.parameter_count)) << what;
          // Every buffer the model allocated, byte for byte, on this backend.
          EXPECT_EQ(p.activations, m.buffer_bytes()) << what;
          // The CPU's attention is the materialised one: at least its fp32 probabilities,
          // B H T T 4 bytes per layer.
          EXPECT_GE(p.activations, 2u * 3 * 2 * 16 * 16 * 4) << what;
          // Without a backend the estimate is Backend's default, the CPU's.
          EXPECT_EQ(plan_memory(c, shape).activations, p.activations) << what;
        }
      }
    }
  }
}

// validate's estimate (no data read): a token source's vocabulary is its vocab_size, so the
// parameters and the logits are GPT-2 small's for gpt2_small's sizes (124M with the padded
// vocabulary, not the 86M of a one-token vocabulary).
TEST(GptMemoryPlan, TokenSourcesTakeTheirVocabularyFromTheConfig) {
  const config::RunConfig c = config::parse_config(
      "model: {type: gpt, n_layer: 12, n_head: 12, n_embd: 768, block_size: 1024}\n"
      "data: {train: {source: tokens, path: train.bin, vocab_size: 50304}}\n",
      "x.yaml", {});
  const DataShape shape = data_shape_from_config(c);
  EXPECT_EQ(shape.outputs, 50304);
  const MemoryPlan p = plan_memory(c, shape);
  EXPECT_GT(p.parameter_count, 124000000);
  EXPECT_LT(p.parameter_count, 125000000);
}

TEST(GptMemoryPlan, AGptTooLargeIsRefusedNamingItsKey) {
  const config::RunConfig c =
      gpt_config({"model.n_embd=8192", "model.n_head=16", "model.n_layer=64"});
  try {
    check_memory(c, DataShape{1, 50304, 1000, 0, true}, uint64_t{1} << 34);
    FAIL() << "no refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("model."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ampctl::train
