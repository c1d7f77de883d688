// End to end on the GPU: one config trained on the CPU and on the GPU makes the same found_inf /
// skip / scale decisions on every step (injected overflows included) with losses within a
// tolerance, and two GPU runs are bitwise identical (time fields aside).
//
// Loss tolerance: the backends differ only in fp32 accumulation order inside matrix products and
// reductions (a few float ulps per value, then at most one lowp ulp after rounding), which
// compounds through 40 optimizer steps; 2% relative on the loss is far above what was measured
// on an H200 (1.6e-4 over 60 steps) and far below a real divergence.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/train/trainer.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

const char* kConfig = R"(
name: e2e
seed: 7
precision: fp16
model: {type: mlp, hidden: [64, 64], activation: gelu, layer_norm: true, dropout: 0.1}
data:
  train: {source: synthetic, task: classification, samples: 1024, features: 24, classes: 5}
  eval: {split_fraction: 0.1}
  batch_size: 64
optimizer: {type: adamw, lr: 1.0e-3}
scheduler: {type: onecycle}
scaler: {growth_interval: 10}
training: {max_steps: 40, grad_clip_norm: 1.0}
logging: {every_steps: 10, metrics_every: 1}
debug: {inject_nonfinite_at: [3, 20]}
)";

std::vector<nlohmann::json> run(const std::string& device, const std::string& tag) {
  const config::RunConfig cfg = config::parse_config(kConfig, "e2e.yaml", {"device=" + device});
  const fs::path dir = fs::temp_directory_path() / ("ampctl_cuda_e2e_" + tag);
  fs::remove_all(dir);
  train::train(cfg, dir);
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    j.erase("time_s");
    lines.push_back(j);
  }
  fs::remove_all(dir);
  return lines;
}

TEST(CudaTraining, SameDecisionsAsCpuAndBitwiseRepeatable) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const auto cpu = run("cpu", "cpu");
  const auto gpu = run("cuda", "gpu");
  const auto gpu2 = run("cuda", "gpu2");
  ASSERT_EQ(cpu.size(), gpu.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].at("kind"), gpu[i].at("kind"));
    if (cpu[i].at("kind") == "train") {
      for (const char* key : {"found_inf", "skipped", "scale", "growth_tracker"}) {
        EXPECT_EQ(cpu[i].at(key), gpu[i].at(key)) << key << " at step " << cpu[i].at("step");
      }
    }
    const double a = cpu[i].at("loss").get<double>(), b = gpu[i].at("loss").get<double>();
    worst = std::max(worst, std::fabs(a - b) / std::max(std::fabs(a), 1e-6));
  }
  EXPECT_LE(worst, 0.02) << "worst relative loss difference CPU vs GPU";
  std::printf("CPU vs GPU: worst relative loss difference %.3g\n", worst);
  EXPECT_EQ(gpu, gpu2) << "two GPU runs differ";
}

}  // namespace
}  // namespace ampctl::train
