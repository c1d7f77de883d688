// The memory estimate: its parts counted by hand for small models, every overflow reported with
// the key that causes it, and the refusal naming the key that drives the largest part.
#include <gtest/gtest.h>

#include <string>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/train/memory_plan.h"

namespace ampctl::train {
namespace {

config::RunConfig config_of(const std::vector<std::string>& sets) {
  return config::parse_config("model: {}\ndata: {}\n", "x.yaml", sets);
}

std::string error_of(const config::RunConfig& c, const DataShape& shape,
                     std::optional<uint64_t> available) {
  try {
    check_memory(c, shape, available);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config) << e.what();
    return e.what();
  }
  return {};
}

TEST(MemoryPlan, PartsOfASmallModel) {
  // 10 -> 20 -> 3, fp16, adamw, batch 4; 100 training and 10 eval rows, classification.
  const config::RunConfig c = config_of({"model.hidden=[20]", "data.batch_size=4"});
  const DataShape shape{10, 3, 100, 10, true};
  const MemoryPlan p = plan_memory(c, shape);
  // Weights 200 (aligned: 208) + bias 20 (32) + weights 60 (64) + bias 3 (16).
  EXPECT_EQ(p.parameter_count, 208 + 32 + 64 + 16);
  EXPECT_EQ(p.parameters, 4u * 320);
  EXPECT_EQ(p.gradients, 4u * 320);
  EXPECT_EQ(p.lowp_copy, 2u * 320);
  EXPECT_EQ(p.optimizer, 8u * 320);
  EXPECT_EQ(p.activations, 16u * 4 * (10 + 20 + 3));
  EXPECT_EQ(p.data, (100u + 10u) * (10 * 4 + 4));
  EXPECT_EQ(p.total,
            p.parameters + p.gradients + p.lowp_copy + p.optimizer + p.activations + p.data);
  // fp32 has no low-precision copy; sgd without momentum keeps no moments, with it one.
  EXPECT_EQ(plan_memory(config_of({"model.hidden=[20]", "precision=fp32"}), shape).lowp_copy, 0u);
  EXPECT_EQ(plan_memory(config_of({"model.hidden=[20]", "optimizer.type=sgd"}), shape).optimizer,
            0u);
  EXPECT_EQ(
      plan_memory(config_of({"model.hidden=[20]", "optimizer.type=sgd", "optimizer.momentum=0.9"}),
                  shape)
          .optimizer,
      4u * 320);
}

TEST(MemoryPlan, OverflowNamesTheWidth) {
  const DataShape shape{8, 4, 256, 0, true};
  const std::string two =
      error_of(config_of({"model.hidden=[2147483647, 2147483647]"}), shape, std::nullopt);
  EXPECT_EQ(two.rfind("model.hidden[1]", 0), 0u) << two;
  EXPECT_NE(two.find("overflows a 64-bit size"), std::string::npos) << two;
  const std::string three = error_of(
      config_of({"model.hidden=[2147483647, 2147483647, 2147483647]"}), shape, std::nullopt);
  EXPECT_EQ(three.rfind("model.hidden[", 0), 0u) << three;
  // Activations: batch x widths x 16 bytes.
  const std::string batch =
      error_of(config_of({"model.hidden=[2147483647, 2147483647]", "data.batch_size=2147483647",
                          "data.drop_last=false"}),
               DataShape{2147483647, 4, 0, 0, true}, std::nullopt);
  EXPECT_NE(batch.find("overflows"), std::string::npos) << batch;
}

TEST(MemoryPlan, RefusalNamesTheLargestPart) {
  const DataShape shape{8, 4, 256, 0, true};
  const config::RunConfig wide = config_of({"model.hidden=[100000000]"});
  const std::string model = error_of(wide, shape, uint64_t{1} << 32);
  EXPECT_EQ(model.rfind("model.hidden: the run needs about ", 0), 0u) << model;
  EXPECT_NE(model.find("GiB of host memory"), std::string::npos) << model;
  EXPECT_NE(model.find("and 4.0 GiB is available"), std::string::npos) << model;
  EXPECT_EQ(error_of(wide, shape, std::nullopt), "");  // unknown memory: no refusal
  EXPECT_EQ(error_of(wide, shape, plan_memory(wide, shape).total), "");  // exactly fits
  const std::string batch = error_of(
      config_of({"model.hidden=[65536]", "data.batch_size=2147483647", "data.drop_last=false"}),
      shape, uint64_t{1} << 32);
  EXPECT_EQ(batch.rfind("data.batch_size: ", 0), 0u) << batch;
  const std::string data = error_of(config_of({"model.hidden=[4]", "data.batch_size=1"}),
                                    DataShape{1000, 2, 1000000000, 0, true}, uint64_t{1} << 32);
  EXPECT_EQ(data.rfind("data.train: ", 0), 0u) << data;
}

TEST(MemoryPlan, ShapeFromTheConfiguration) {
  const DataShape s = data_shape_from_config(
      config_of({"data.train.features=12", "data.train.classes=5", "data.train.samples=300",
                 "data.eval={source: synthetic, features: 12, classes: 5, samples: 40}"}));
  EXPECT_EQ(s.features, 12);
  EXPECT_EQ(s.outputs, 5);
  EXPECT_EQ(s.train_samples, 300);
  EXPECT_EQ(s.eval_samples, 40);
  EXPECT_TRUE(s.exact);
  // A csv is known only once read: a lower bound.
  const DataShape csv =
      data_shape_from_config(config_of({"data.train={source: csv, path: a.csv}"}));
  EXPECT_FALSE(csv.exact);
  EXPECT_EQ(csv.train_samples, 0);
}

}  // namespace
}  // namespace ampctl::train
