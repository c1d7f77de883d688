// A GPT on text data through the whole trainer: the run directory's vocab.json and the
// checkpoint's vocab, tokens/s and perplexity in the summary, and the exact resume with
// dropout on: a run checkpointed at a mid-run step (also between the micro-batches of
// gradient accumulation, with the cursor of the language-model batcher) and resumed ends
// bitwise where an uninterrupted run ends.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("lm", name);
}

fs::path write_text(const std::string& name) {
  const fs::path dir = fresh_dir("text");
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream out(path);
  for (int i = 0; i < 30; ++i) out << "to be, or not to be: that is the question " << i << ".\n";
  return path;
}

config::RunConfig make_config(const fs::path& text, const std::vector<std::string>& sets = {}) {
  const std::string yaml = R"(
name: lm
seed: 5
device: cpu
precision: fp16
model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 8, dropout: 0.1, bias: true}
data:
  train: {source: text, path: )" +
                           text.string() + R"(, vocab: char}
  batch_size: 3
optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.1, decay_on: matrices}
scheduler: {type: cosine, warmup_steps: 2}
scaler: {init_scale: 1024.0, growth_interval: 3}
training: {max_steps: 10, grad_accum_steps: 2, grad_clip_norm: 1.0, eval_every: 4, eval_batches: 3}
logging: {every_steps: 3, metrics_every: 1}
)";
  return config::parse_config(yaml, "lm.yaml", sets);
}

std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) {
  const Tensor h = b.to_host(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

std::vector<std::string> metrics_without_time(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("time_s");
    out.push_back(j.dump());
  }
  return out;
}

// Gradient numerics on the GPT (nn/numerics.h): counting every step and recording grad_amax
// leave the run bitwise identical (every metric but time and grad_amax, the final parameters),
// with dropout and gradient accumulation; grad_amax is on every train line and the numerics
// lines count for every tensor that rounds (none for wpe and the LayerNorm biases).
TEST(LmRun, GradientNumericsAndGradAmaxLeaveTheRunBitwiseIdentical) {
  const fs::path text = write_text("n.txt");
  for (const char* prec : {"fp16", "bf16"}) {
    std::vector<std::vector<std::string>> lines(2);
    std::vector<std::vector<uint8_t>> params(2);
    for (int on = 0; on < 2; ++on) {
      std::vector<std::string> sets = {std::string("precision=") + prec, "training.max_steps=6"};
      if (on) {
        sets.push_back("logging.numerics_every=1");
        sets.push_back("logging.grad_amax=true");
      } else {
        sets.push_back("logging.grad_amax=false");  // on by default
      }
      const fs::path dir = fresh_dir(std::string("numerics_") + prec + (on ? "_on" : "_off"));
      Trainer t(make_config(text, sets), dir);
      t.run();
      EXPECT_TRUE(t.model().roundings_instrumented());
      params[on] = bytes_of(t.backend(), t.model().params());
      std::ifstream in(dir / "metrics.jsonl");
      std::string line;
      int64_t train_lines = 0, numerics_lines = 0;
      while (std::getline(in, line)) {
        nlohmann::json j = nlohmann::json::parse(line);
        j.erase("time_s");
        if (j.at("kind") == "numerics") {
          ++numerics_lines;
          for (const auto& [name, tensor] : j.at("tensors").items()) {
            const bool rounds_nothing =
                name == "transformer.wpe.weight" || (name.find(".ln_") != std::string::npos &&
                                                     name.size() > 5 && name.ends_with(".bias"));
            EXPECT_EQ(tensor.at("values").get<int64_t>() == 0, rounds_nothing) << name;
          }
          continue;
        }
        if (j.at("kind") == "train") {
          ++train_lines;
          EXPECT_EQ(j.contains("grad_amax"), on == 1) << line;
          if (on) {
            EXPECT_GT(j.at("grad_amax").get<double>(), 0.0) << line;
          }
          j.erase("grad_amax");
          j.erase("grad_amax_exact");
        }
        lines[on].push_back(j.dump());
      }
      EXPECT_EQ(train_lines, 6);
      EXPECT_EQ(numerics_lines, on ? 6 : 0);
      fs::remove_all(dir);
    }
    EXPECT_EQ(lines[0], lines[1]) << prec;
    EXPECT_EQ(params[0], params[1]) << prec;
  }
  fs::remove_all(text.parent_path());
}

TEST(LmRun, VocabularyTokensPerSecondAndPerplexityAreRecorded) {
  const fs::path text = write_text("a.txt");
  const fs::path dir = fresh_dir("records");
  Trainer t(make_config(text, {"training.max_steps=4"}), dir);
  const TrainOutcome out = t.run();
  // vocab.json: the text's distinct characters, sorted.
  std::ifstream in(dir / "vocab.json");
  const nlohmann::json vocab = nlohmann::json::parse(in);
  ASSERT_TRUE(vocab.is_array());
  EXPECT_EQ(vocab[0], "\n");
  EXPECT_EQ(vocab[1], " ");
  std::vector<std::string> strings = vocab.get<std::vector<std::string>>();
  EXPECT_TRUE(std::is_sorted(strings.begin(), strings.end()));
  EXPECT_EQ(t.model().out_features(), static_cast<int64_t>(vocab.size()));
  // The checkpoint holds the same vocabulary.
  const checkpoint::CheckpointData ck = checkpoint::read_checkpoint(dir);
  EXPECT_EQ(ck.vocab, vocab);
  EXPECT_EQ(ck.data, (nlohmann::json{{"batches", 4 * 2}}));
  // tokens/s = samples/s x block_size; the eval line's perplexity is exp(loss).
  EXPECT_NEAR(out.summary.at("tokens_per_s").get<double>(),
              out.summary.at("samples_per_s").get<double>() * 8,
              1e-6 * out.summary.at("tokens_per_s").get<double>());
  const nlohmann::json& eval = out.summary.at("eval");
  EXPECT_DOUBLE_EQ(eval.at("perplexity").get<double>(), std::exp(eval.at("loss").get<double>()));
  EXPECT_FALSE(eval.contains("accuracy"));
  fs::remove_all(dir);
  fs::remove_all(text.parent_path());
}

TEST(LmRun, ResumeWithDropoutIsBitwiseExact) {
  const fs::path text = write_text("b.txt");
  const config::RunConfig cfg = make_config(text);
  const fs::path full_dir = fresh_dir("full");
  std::vector<uint8_t> params;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> opt;
  nlohmann::json scaler;
  std::vector<std::string> metrics;
  {
    Trainer t(cfg, full_dir);
    t.run();
    params = bytes_of(t.backend(), t.model().params());
    for (const auto& [name, tensor] : t.optimizer().state_tensors())
      opt.emplace_back(name, bytes_of(t.backend(), tensor));
    scaler = t.scaler().state_dict();
    metrics = metrics_without_time(full_dir);
  }
  for (int64_t k : {int64_t{3}, int64_t{4}, int64_t{7}}) {
    const std::string what = "split at " + std::to_string(k);
    const fs::path dir = fresh_dir("split" + std::to_string(k));
    fs::path ckpt;
    {
      Trainer t(cfg, dir);
      t.begin();
      for (int64_t i = 0; i < k; ++i) t.step();
      ckpt = t.write_checkpoint();
      t.step();  // runs on, then dies
      (void)t.checkpoint_data();
    }
    const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(ckpt);
    Trainer t(config::from_json(loaded.data.config, "checkpoint"), dir);
    t.resume(loaded.data);
    while (!t.done()) t.step();
    t.finish();
    EXPECT_TRUE(bytes_of(t.backend(), t.model().params()) == params) << what;
    const auto state = t.optimizer().state_tensors();
    ASSERT_EQ(state.size(), opt.size());
    for (size_t i = 0; i < opt.size(); ++i) {
      EXPECT_TRUE(bytes_of(t.backend(), state[i].second) == opt[i].second)
          << what << ": " << opt[i].first;
    }
    EXPECT_EQ(t.scaler().state_dict().dump(), scaler.dump()) << what;
    EXPECT_EQ(metrics_without_time(dir), metrics) << what;
    fs::remove_all(dir);
  }
  fs::remove_all(full_dir);
  fs::remove_all(text.parent_path());
}

}  // namespace
}  // namespace ampctl::train
