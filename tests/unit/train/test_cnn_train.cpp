// model.type: cnn through the trainer (docs/reference.md, "The CNN"): exact resume with
// BatchNorm's buffers in the checkpoint, overflow attribution by parameter name, the buffers in
// the checkpoint's model tensors, and a cnn on feature rows refused as a config error naming
// model.type. The data is a small IDX pair written by the test (1 x 8 x 8 images).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/config/run_config.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("cnn", name);
}

void put_u32(std::ofstream& out, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out.write(b, 4);
}

// 96 images 8 x 8 of 3 classes: class k is a bright band at rows 2k..2k+2 plus noise.
fs::path write_images(const fs::path& dir) {
  fs::create_directories(dir);
  std::mt19937 rng(3);
  std::ofstream img(dir / "images.idx", std::ios::binary),
      lab(dir / "labels.idx", std::ios::binary);
  const uint32_t n = 96;
  put_u32(img, 0x00000803);
  put_u32(img, n);
  put_u32(img, 8);
  put_u32(img, 8);
  put_u32(lab, 0x00000801);
  put_u32(lab, n);
  for (uint32_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % 3);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        int v = static_cast<int>(rng() % 60);
        if (r >= 2 * k && r <= 2 * k + 2) v += 150;
        img.put(static_cast<char>(v));
      }
    lab.put(static_cast<char>(k));
  }
  return dir;
}

std::string config_text(const fs::path& data) {
  return "name: cnn\nseed: 4\ndevice: cpu\nprecision: fp16\n"
         "model: {type: cnn, conv: [[4, 3], [6, 3]], pool: 2, batch_norm: true, hidden: [16], "
         "dropout: 0.2}\n"
         "data:\n  train: {source: idx, images: " +
         (data / "images.idx").string() + ", labels: " + (data / "labels.idx").string() +
         "}\n  eval: {split_fraction: 0.1}\n  batch_size: 16\n"
         "optimizer: {type: adamw, lr: 3.0e-3}\nscheduler: {type: onecycle}\n"
         "scaler: {init_scale: 1024.0, growth_interval: 3}\n"
         "training: {max_steps: 12, eval_every: 5}\nlogging: {every_steps: 4, metrics_every: 1}\n";
}

std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) {
  const Tensor h = b.to_host(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

struct End {
  std::vector<uint8_t> params;
  std::vector<std::vector<uint8_t>> buffers, optimizer;
  std::string scaler;
};

End end_of(Trainer& t) {
  End e;
  e.params = bytes_of(t.backend(), t.model().params());
  for (const auto& [name, tensor] : t.model().state_buffers())
    e.buffers.push_back(bytes_of(t.backend(), tensor));
  for (const auto& [name, tensor] : t.optimizer().state_tensors())
    e.optimizer.push_back(bytes_of(t.backend(), tensor));
  e.scaler = t.scaler().state_dict().dump();
  return e;
}

// Gradient numerics on the CNN (nn/numerics.h): counting every step and grad_amax leave the
// run bitwise identical (every metric but time and grad_amax, the final parameters and
// BatchNorm's buffers); every tensor but BatchNorm's beta counts values.
TEST(CnnTrain, GradientNumericsAndGradAmaxLeaveTheRunBitwiseIdentical) {
  const fs::path data = write_images(fresh_dir("data_numerics"));
  std::vector<std::vector<std::string>> lines(2);
  std::vector<std::vector<uint8_t>> state(2);
  for (int on = 0; on < 2; ++on) {
    std::vector<std::string> sets;
    // grad_amax is on by default: the "off" run turns it off.
    sets = {"logging.grad_amax=false"};
    if (on) sets = {"logging.numerics_every=1", "logging.grad_amax=true"};
    const fs::path dir = fresh_dir(on ? "numerics_on" : "numerics_off");
    Trainer t(config::parse_config(config_text(data), "cnn.yaml", sets), dir);
    t.run();
    EXPECT_TRUE(t.model().roundings_instrumented());
    state[on] = bytes_of(t.backend(), t.model().params());
    for (const auto& [name, buffer] : t.model().state_buffers()) {
      const std::vector<uint8_t> b = bytes_of(t.backend(), buffer);
      state[on].insert(state[on].end(), b.begin(), b.end());
    }
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    int64_t numerics_lines = 0;
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("time_s");
      if (j.at("kind") == "numerics") {
        ++numerics_lines;
        for (const auto& [name, tensor] : j.at("tensors").items()) {
          const bool beta = name == "features.1.bias" || name == "features.5.bias";
          EXPECT_EQ(tensor.at("values").get<int64_t>() == 0, beta) << name;
        }
        continue;
      }
      if (j.at("kind") == "train") {
        EXPECT_EQ(j.contains("grad_amax"), on == 1) << line;
        if (on) {
          EXPECT_GT(j.at("grad_amax").get<double>(), 0.0) << line;
        }
        j.erase("grad_amax");
        j.erase("grad_amax_exact");
      }
      lines[on].push_back(j.dump());
    }
    EXPECT_EQ(numerics_lines, on ? 12 : 0);
    fs::remove_all(dir);
  }
  EXPECT_EQ(lines[0], lines[1]);
  EXPECT_EQ(state[0], state[1]);
  fs::remove_all(data);
}

TEST(CnnTrain, ResumeWithBatchNormIsBitwiseExact) {
  const fs::path data = write_images(fresh_dir("data"));
  const config::RunConfig cfg = config::parse_config(config_text(data), "cnn.yaml");
  const fs::path full_dir = fresh_dir("full");
  End full;
  {
    Trainer t(cfg, full_dir);
    t.run();
    full = end_of(t);
    // BatchNorm's counter counts the training forwards: one per step.
    const auto buffers = t.model().state_buffers();
    ASSERT_EQ(buffers.size(), 6u);
    EXPECT_EQ(buffers[2].first, "features.1.num_batches_tracked");
    EXPECT_EQ(t.backend().read_scalar_i32(buffers[2].second), 12);
  }
  for (int64_t k : {int64_t{3}, int64_t{7}}) {
    const fs::path dir = fresh_dir("split" + std::to_string(k));
    fs::path ckpt;
    {
      Trainer t(cfg, dir);
      t.begin();
      for (int64_t i = 0; i < k; ++i) t.step();
      ckpt = t.write_checkpoint();
      for (int64_t i = 0; i < 2; ++i) t.step();  // runs on: resume must not see these
    }
    const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(ckpt);
    // The buffers are in the checkpoint's model tensors, after the parameters.
    std::vector<std::string> names;
    for (const auto& t : loaded.data.model) names.push_back(t.name);
    EXPECT_NE(std::find(names.begin(), names.end(), "features.1.running_var"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "features.5.num_batches_tracked"), names.end());
    Trainer t(config::from_json(loaded.data.config, "checkpoint"), dir);
    t.resume(loaded.data);
    while (!t.done()) t.step();
    t.finish();
    const End got = end_of(t);
    EXPECT_TRUE(got.params == full.params) << "split " << k << ": parameters differ";
    EXPECT_TRUE(got.buffers == full.buffers) << "split " << k << ": BatchNorm buffers differ";
    EXPECT_TRUE(got.optimizer == full.optimizer) << "split " << k << ": optimizer state differs";
    EXPECT_EQ(got.scaler, full.scaler) << "split " << k;
    fs::remove_all(dir);
  }
  fs::remove_all(full_dir);
  fs::remove_all(data);
}

// scaler.on_overflow: retry with BatchNorm: a retried step's second training forward must not
// move the running statistics twice. After the retried step 4 the buffers equal those of the
// run without the overflow, bit for bit (the same batch through the same weights gives the same
// batch statistics; num_batches_tracked counts one forward per step), and the loss too.
TEST(CnnTrain, ARetriedStepUpdatesBatchNormOnce) {
  const fs::path data = write_images(fresh_dir("data_retry"));
  auto buffers_after = [&](const std::vector<std::string>& sets, int64_t steps, double& loss) {
    const config::RunConfig cfg = config::parse_config(config_text(data), "cnn.yaml", sets);
    const fs::path dir = fresh_dir("retry");
    Trainer t(cfg, dir);
    t.begin();
    for (int64_t i = 0; i < steps; ++i) t.step();
    t.finish();
    End e = end_of(t);
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.at("kind") == "train" && j.at("step") == steps) loss = j.at("loss").get<double>();
    }
    fs::remove_all(dir);
    return e.buffers;
  };
  double clean_loss = 0, retried_loss = 0, skipped_loss = 0;
  const auto clean = buffers_after({"scaler.on_overflow=retry"}, 4, clean_loss);
  const auto retried =
      buffers_after({"scaler.on_overflow=retry", "debug.inject_nonfinite_at=[4]"}, 4, retried_loss);
  EXPECT_TRUE(retried == clean) << "BatchNorm buffers after the retried step differ";
  EXPECT_EQ(retried_loss, clean_loss);
  // What the retry undoes: the statistics move with every training forward, so two forwards
  // of step 4 (the buffers not restored) would differ from one; a skipped step 4 runs one.
  const auto skipped = buffers_after({"debug.inject_nonfinite_at=[4]"}, 4, skipped_loss);
  EXPECT_TRUE(skipped == clean) << "a skipped step moves the statistics once too";
  fs::remove_all(data);
}

TEST(CnnTrain, AnInjectedOverflowIsAttributedByName) {
  const fs::path data = write_images(fresh_dir("data_attr"));
  for (const std::string name : {"features.0.weight", "features.1.bias", "classifier.1.weight"}) {
    const config::RunConfig cfg =
        config::parse_config(config_text(data), "cnn.yaml",
                             {"debug.inject_nonfinite_at=[2, 6]",
                              "debug.inject_tensor=\"" + name + "\"", "training.max_steps=7"});
    const fs::path dir = fresh_dir("attr");
    const TrainOutcome out = train::train(cfg, dir);
    EXPECT_EQ(out.summary.at("overflow_counts"), (nlohmann::json{{name, 2}})) << name;
    EXPECT_EQ(out.summary.at("skipped_steps").get<int64_t>(), 2) << name;
    fs::remove_all(dir);
  }
  fs::remove_all(data);
}

TEST(CnnTrain, ACnnOnFeatureRowsIsAConfigErrorNamingModelType) {
  const fs::path dir = fresh_dir("rows");
  try {
    // Refused when the configuration is read (validate refuses it too), or at the latest when
    // the trainer builds the model.
    const config::RunConfig cfg = config::parse_config(
        "device: cpu\nmodel: {type: cnn}\n"
        "data: {train: {source: synthetic, samples: 256, features: 8, classes: 2}}\n",
        "cnn.yaml");
    Trainer t(cfg, dir);
    t.begin();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("model.type"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ampctl::train
