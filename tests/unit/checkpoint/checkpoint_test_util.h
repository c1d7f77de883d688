// Helpers for the checkpoint tests: seeded sample checkpoints with random tensors of every
// dtype, scratch directories, and capturing spdlog warnings.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/core/half.h"
#include "test_util.h"

namespace ampctl::checkpoint::testing {

namespace fs = std::filesystem;

using ampctl::testing::ScratchDir;

// Routes spdlog's default logger into a string for the scope's lifetime.
class CaptureLog {
 public:
  CaptureLog() : m_previous(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(m_stream);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~CaptureLog() { spdlog::set_default_logger(m_previous); }
  CaptureLog(const CaptureLog&) = delete;
  CaptureLog& operator=(const CaptureLog&) = delete;
  std::string text() const { return m_stream.str(); }

 private:
  std::ostringstream m_stream;
  std::shared_ptr<spdlog::logger> m_previous;
};

template <typename T>
NamedTensor tensor_of(const std::string& name, DType dtype, const Shape& shape,
                      const std::vector<T>& values) {
  NamedTensor t{name, dtype, shape, std::vector<uint8_t>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// Random values of each dtype: normal floats (as a trained model's), rounded to f16/bf16 by the
// library's converters, and arbitrary int32s.
inline NamedTensor random_tensor(std::mt19937_64& rng, const std::string& name, DType dtype,
                                 const Shape& shape) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::normal_distribution<float> normal(0.0f, 0.5f);
  switch (dtype) {
    case DType::f32: {
      std::vector<float> v(n);
      for (float& x : v) x = normal(rng);
      return tensor_of(name, dtype, shape, v);
    }
    case DType::f16: {
      std::vector<uint16_t> v(n);
      for (uint16_t& x : v) x = half(normal(rng) * 100.0f).bits;
      return tensor_of(name, dtype, shape, v);
    }
    case DType::bf16: {
      std::vector<uint16_t> v(n);
      for (uint16_t& x : v) x = bfloat16(normal(rng) * 1e10f).bits;
      return tensor_of(name, dtype, shape, v);
    }
    case DType::i32: {
      std::vector<int32_t> v(n);
      for (int32_t& x : v) x = static_cast<int32_t>(rng());
      return tensor_of(name, dtype, shape, v);
    }
  }
  return {};
}

// A checkpoint as the trainer would write it: an MLP with every dtype present, Adam moments,
// an fp16 scaler state. `width` scales the first layer (for tests that want large files).
inline CheckpointData make_sample(uint64_t seed, int64_t step, int64_t width = 32) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(step));
  CheckpointData d;
  d.step = step;
  d.config = {{"name", "sample"},
              {"seed", 7},
              {"precision", "fp16"},
              {"model", {{"type", "mlp"}, {"hidden", {width, 16}}, {"activation", "relu"}}},
              {"optimizer", {{"type", "adamw"}, {"lr", 0.001}, {"betas", {0.9, 0.999}}}},
              {"scaler", {{"max_scale", ".inf"}}}};
  d.scaler = {{"scale", 32768.0},
              {"growth_factor", 2.0},
              {"backoff_factor", 0.5},
              {"growth_interval", 2000},
              {"_growth_tracker", static_cast<int64_t>(rng() % 2000)},
              {"_hysteresis_tracker", 1}};
  // "layers.10.*" before "layers.2.*": the stored order must be the vector's, not sorted.
  d.model.push_back(random_tensor(rng, "layers.0.weight", DType::f32, {width, 12}));
  d.model.push_back(random_tensor(rng, "layers.0.bias", DType::f32, {width}));
  d.model.push_back(random_tensor(rng, "layers.10.weight", DType::f32, {16, width}));
  d.model.push_back(random_tensor(rng, "layers.2.norm", DType::f16, {16}));
  d.model.push_back(random_tensor(rng, "layers.2.weight", DType::bf16, {5, 16}));
  d.model.push_back(random_tensor(rng, "counts", DType::i32, {3, 1, 7}));
  d.model.push_back(random_tensor(rng, "empty", DType::f32, {0, 4}));
  d.model.push_back(random_tensor(rng, "scalar", DType::f32, {}));
  for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
    d.optimizer_tensors.push_back(
        random_tensor(rng, std::string(moment) + ".flat", DType::f32, {width * 12 + width}));
  }
  d.optimizer = {{"type", "adamw"}, {"step", step}, {"param_groups", {{{"lr", 0.001}}}}};
  d.scheduler = {{"type", "constant"}, {"last_epoch", step}};
  d.rng = {{"seed", 7}, {"counter", static_cast<uint64_t>(rng())}};
  d.data = {{"epoch", step / 10}, {"position", step % 10}};
  d.metrics = {{"last_loss", 0.25 + static_cast<double>(rng() % 1000) / 997.0},
               {"skipped_steps", 3}};
  return d;
}

}  // namespace ampctl::checkpoint::testing
