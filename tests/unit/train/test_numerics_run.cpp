// Gradient numerics and TensorBoard on real runs (train/numerics.h, run/tensorboard.h):
//   * sampling every step leaves training bitwise identical to not sampling (metrics, time
//     fields aside, and the checkpoint's model, optimizer and scaler state), and writes one
//     numerics line per sampled step with docs/reference.md's fields;
//   * the event file, read back by a reader written here from the format (its own bitwise
//     CRC-32C, its own varint and protobuf decoding), has valid CRCs everywhere and every scalar
//     equal to metrics.jsonl.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ampctl/config/run_config.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("numerics", name);
}

const char* kRun = R"(
name: numerics
seed: 5
device: cpu
precision: fp16
model: {type: mlp, hidden: [24, 16], activation: gelu, dropout: 0.1, layer_norm: true}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 12, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
scaler: {init_scale: 1.0e+5, growth_interval: 5}
training: {max_steps: 24, eval_every: 12, grad_accum_steps: 2, grad_clip_norm: 1.0}
checkpoint: {every_steps: 12}
logging: {every_steps: 5, metrics_every: 1}
)";

std::vector<nlohmann::json> read_lines(const fs::path& p, const std::string& kind) {
  std::ifstream in(p);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("kind") == kind) out.push_back(j);
  }
  return out;
}

nlohmann::json checkpoint_state(const fs::path& dir) {
  std::ifstream latest(dir / "checkpoints" / "latest");
  std::string name;
  latest >> name;
  std::ifstream in(dir / "checkpoints" / name);
  nlohmann::json j = nlohmann::json::parse(in);
  return {{"model", j.at("model")},
          {"optimizer", j.at("optimizer")},
          {"scaler", j.at("scaler")},
          {"rng", j.at("rng")},
          {"data", j.at("data")}};
}

TEST(NumericsRun, SamplingEveryStepLeavesTrainingBitwiseIdentical) {
  for (const char* prec : {"fp16", "bf16"}) {
    const fs::path off = fresh_dir(std::string("off_") + prec);
    const fs::path on = fresh_dir(std::string("on_") + prec);
    std::vector<std::string> sets = {std::string("precision=") + prec};
    if (std::string(prec) == "fp16") sets.push_back("debug.inject_nonfinite_at=[7]");
    std::vector<std::string> off_sets = sets;
    off_sets.push_back("logging.grad_amax=false");  // on by default
    const TrainOutcome a = train::train(config::parse_config(kRun, "n.yaml", off_sets), off);
    sets.push_back("logging.numerics_every=1");
    sets.push_back("logging.grad_amax=true");  // nor does grad_amax
    const TrainOutcome b = train::train(config::parse_config(kRun, "n.yaml", sets), on);
    auto ta = read_lines(off / "metrics.jsonl", "train");
    auto tb = read_lines(on / "metrics.jsonl", "train");
    ASSERT_EQ(ta.size(), 24u);
    ASSERT_EQ(ta.size(), tb.size());
    for (size_t i = 0; i < ta.size(); ++i) {
      ta[i].erase("time_s");
      tb[i].erase("time_s");
      EXPECT_FALSE(ta[i].contains("grad_amax"));
      EXPECT_GT(tb[i].at("grad_amax").get<double>(), 0.0) << prec << " step " << i + 1;
      tb[i].erase("grad_amax");
      tb[i].erase("grad_amax_exact");
      EXPECT_EQ(ta[i], tb[i]) << prec << " step " << i + 1;
    }
    auto ea = read_lines(off / "metrics.jsonl", "eval");
    auto eb = read_lines(on / "metrics.jsonl", "eval");
    ASSERT_EQ(ea.size(), eb.size());
    for (size_t i = 0; i < ea.size(); ++i) EXPECT_EQ(ea[i].at("loss"), eb[i].at("loss"));
    EXPECT_EQ(checkpoint_state(off), checkpoint_state(on)) << prec;
    EXPECT_TRUE(read_lines(off / "metrics.jsonl", "numerics").empty());
    EXPECT_FALSE(a.summary.contains("scale_advice"));

    const auto lines = read_lines(on / "metrics.jsonl", "numerics");
    ASSERT_EQ(lines.size(), 24u) << prec;
    for (size_t i = 0; i < lines.size(); ++i) {
      const nlohmann::json& l = lines[i];
      for (const char* key : {"step", "scale", "values", "underflow", "subnormal", "underflow_frac",
                              "subnormal_frac", "min_headroom_log2", "tensors"}) {
        EXPECT_TRUE(l.contains(key)) << key;
      }
      EXPECT_EQ(l.size(), 10u) << l.dump();
      EXPECT_EQ(l.at("step").get<int64_t>(), static_cast<int64_t>(i + 1));
      EXPECT_EQ(l.at("scale"), ta[i].at("scale")) << "the scale the backward used";
      int64_t values = 0, under = 0;
      for (const auto& [name, t] : l.at("tensors").items()) {
        EXPECT_EQ(t.size(), 4u) << name;
        values += t.at("values").get<int64_t>();
        under += t.at("underflow").get<int64_t>();
      }
      EXPECT_EQ(values, l.at("values").get<int64_t>());
      EXPECT_EQ(under, l.at("underflow").get<int64_t>());
      EXPECT_GT(values, 0);
      // layers.0.weight takes its dW and the gradients entering it; LayerNorm's beta rounds
      // nothing of its own.
      EXPECT_GT(l.at("tensors").at("layers.0.weight").at("values").get<int64_t>(), 0);
      EXPECT_EQ(l.at("tensors").at("layers.1.bias").at("values").get<int64_t>(), 0);
      EXPECT_TRUE(l.at("tensors").at("layers.1.bias").at("headroom_log2").is_null());
    }
    if (std::string(prec) == "fp16") {
      // The injected step is not a rounding overflow; a scale of 1e5 with these gradients is
      // far from 65504, so the headroom is positive on the first step.
      EXPECT_GT(lines[0].at("min_headroom_log2").get<double>(), 0.0);
    }
    ASSERT_TRUE(b.summary.contains("scale_advice")) << b.summary.dump();
    EXPECT_TRUE(b.summary.at("numerics").at("samples") == 24);
    fs::remove_all(off);
    fs::remove_all(on);
  }
}

// ---- an independent TFRecord / Event reader, from the format ----
uint32_t crc32c_bitwise(const unsigned char* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t masked(uint32_t c) {
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; p < end; shift += 7) {
      const unsigned char b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "truncated varint";
    return v;
  }
};

struct Scalar {
  int64_t step;
  std::string tag;
  float value;
};

// Parses one Event; returns its scalars, sets file_version when it holds one.
std::vector<Scalar> parse_event(const std::string& data, std::string& file_version) {
  std::vector<Scalar> out;
  Reader r{reinterpret_cast<const unsigned char*>(data.data()),
           reinterpret_cast<const unsigned char*>(data.data()) + data.size()};
  int64_t step = 0;
  std::string summary;
  while (r.p < r.end) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (wire == 1) {
      EXPECT_EQ(field, 1);  // wall_time
      r.p += 8;
    } else if (wire == 0) {
      EXPECT_EQ(field, 2);
      step = static_cast<int64_t>(r.varint());
    } else if (wire == 2) {
      const uint64_t n = r.varint();
      const std::string s(reinterpret_cast<const char*>(r.p), n);
      r.p += n;
      if (field == 3)
        file_version = s;
      else if (field == 5)
        summary = s;
      else
        ADD_FAILURE() << "unexpected field " << field;
    } else {
      ADD_FAILURE() << "unexpected wire type " << wire;
      return out;
    }
  }
  Reader s{reinterpret_cast<const unsigned char*>(summary.data()),
           reinterpret_cast<const unsigned char*>(summary.data()) + summary.size()};
  while (s.p < s.end) {
    EXPECT_EQ(s.varint(), (1u << 3) | 2u);  // Summary.value
    const uint64_t n = s.varint();
    Reader v{s.p, s.p + n};
    s.p += n;
    Scalar sc{step, "", 0.0f};
    while (v.p < v.end) {
      const uint64_t key = v.varint();
      if (key == ((1u << 3) | 2u)) {
        const uint64_t len = v.varint();
        sc.tag.assign(reinterpret_cast<const char*>(v.p), len);
        v.p += len;
      } else if (key == ((2u << 3) | 5u)) {
        const auto bits = static_cast<uint32_t>(le(v.p, 4));
        std::memcpy(&sc.value, &bits, 4);
        v.p += 4;
      } else {
        ADD_FAILURE() << "unexpected Summary.Value key " << key;
        return out;
      }
    }
    out.push_back(sc);
  }
  return out;
}

std::vector<Scalar> read_events(const fs::path& file, std::string& file_version) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t at = 0, records = 0;
  std::vector<Scalar> out;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << "torn record";
    const uint64_t len = le(p + at, 8);
    EXPECT_EQ(le(p + at + 8, 4), masked(crc32c_bitwise(p + at, 8)))
        << "length CRC, record " << records;
    const std::string data(bytes.data() + at + 12, len);
    EXPECT_EQ(le(p + at + 12 + len, 4), masked(crc32c_bitwise(p + at + 12, len)))
        << "data CRC, record " << records;
    std::string fv;
    for (Scalar& s : parse_event(data, fv)) out.push_back(s);
    if (records == 0) file_version = fv;
    at += 16 + len;
    ++records;
  }
  return out;
}

TEST(TensorBoard, TheReaderAgreesOnKnownCrcsAndTheEventFileMatchesMetrics) {
  // CRC-32C check value of "123456789" (the Castagnoli standard), so the reader's CRC is right.
  const char* check = "123456789";
  ASSERT_EQ(crc32c_bitwise(reinterpret_cast<const unsigned char*>(check), 9), 0xe3069283u);

  const fs::path dir = fresh_dir("tb");
  const TrainOutcome out = train::train(
      config::parse_config(kRun, "n.yaml",
                           {"logging.tensorboard=true", "logging.numerics_every=4",
                            "logging.grad_amax=true", "debug.inject_nonfinite_at=[6]"}),
      dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  std::string file_version;
  const std::vector<Scalar> scalars = read_events(files[0], file_version);
  EXPECT_EQ(file_version, "brain.Event:2");
  std::map<std::pair<std::string, int64_t>, float> tb;
  for (const Scalar& s : scalars) tb[{s.tag, s.step}] = s.value;

  auto expect = [&](const std::string& tag, int64_t step, const nlohmann::json& v) {
    const auto it = tb.find({tag, step});
    ASSERT_NE(it, tb.end()) << tag << " at step " << step;
    if (v.is_null()) {
      EXPECT_FALSE(std::isfinite(it->second)) << tag << " at step " << step;
    } else {
      EXPECT_EQ(it->second, static_cast<float>(v.get<double>())) << tag << " at step " << step;
    }
  };
  size_t expected = 0;
  for (const nlohmann::json& l : read_lines(dir / "metrics.jsonl", "train")) {
    const int64_t step = l.at("step");
    expect("train/loss", step, l.at("loss"));
    expect("train/lr", step, l.at("lr"));
    expect("amp/scale", step, l.at("scale"));
    expect("amp/skipped", step, l.at("skipped").get<bool>() ? 1.0 : 0.0);
    expect("amp/growth_tracker", step, l.at("growth_tracker"));
    expected += 5;
    // A skipped step's norm is not finite: null on its line, and no scalar.
    if (!l.at("grad_norm").is_null()) {
      expect("train/grad_norm", step, l.at("grad_norm"));
      ++expected;
    }
    // grad_amax (the MLP in fp16: on every line) and the headroom at the step's scale. The
    // headroom comes from the float max the device kept, x = grad_amax x scale / 2 micro-
    // batches here up to one f32 rounding of the product (relative 2^-24): log2 within 1e-6.
    ASSERT_TRUE(l.contains("grad_amax") && l.at("grad_amax_exact").get<bool>()) << l.dump();
    expect("amp/grad_amax", step, l.at("grad_amax"));
    ++expected;
    const double at_scale = l.at("grad_amax").get<double>() * l.at("scale").get<double>() / 2;
    ASSERT_GT(at_scale, 0.0);
    const auto h = tb.find({"amp/headroom_log2", step});
    ASSERT_NE(h, tb.end()) << "amp/headroom_log2 at step " << step;
    EXPECT_NEAR(h->second, std::log2(65504.0 / at_scale), 1e-5) << "step " << step;
    ++expected;
  }
  for (const nlohmann::json& l : read_lines(dir / "metrics.jsonl", "eval")) {
    expect("eval/loss", l.at("step"), l.at("loss"));
    expect("eval/accuracy", l.at("step"), l.at("accuracy"));
    expected += 2;
  }
  const auto numerics = read_lines(dir / "metrics.jsonl", "numerics");
  ASSERT_EQ(numerics.size(), 6u);
  for (const nlohmann::json& l : numerics) {
    expect("amp/underflow_frac", l.at("step"), l.at("underflow_frac"));
    ++expected;
    for (const auto& [name, t] : l.at("tensors").items()) {
      if (t.at("headroom_log2").is_null()) continue;
      expect("amp/headroom_log2/" + name, l.at("step"), t.at("headroom_log2"));
      ++expected;
    }
  }
  size_t perf = 0;
  for (const Scalar& s : scalars) perf += s.tag == "perf/samples_per_s";
  EXPECT_GT(perf, 0u);
  EXPECT_EQ(scalars.size(), expected + perf) << "no scalar without its metrics line";
  EXPECT_EQ(out.summary.at("steps"), 24);
  fs::remove_all(dir);
}

// scaler.on_overflow: retry: amp/retries at every logged step, equal to the train line's retries
// (0 where the line has none), and their sum to summary.json's. The scale starts far too high,
// so early steps exhaust their retries; an injected overflow later retries once.
TEST(TensorBoard, RetriesAtEveryStepWithOnOverflowRetry) {
  const fs::path dir = fresh_dir("tb-retry");
  const TrainOutcome out =
      train::train(config::parse_config(kRun, "n.yaml",
                                        {"logging.tensorboard=true", "scaler.on_overflow=retry",
                                         "scaler.max_retries=3", "scaler.init_scale=1.0e+12",
                                         "debug.inject_nonfinite_at=[20]"}),
                   dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  std::string file_version;
  std::map<int64_t, float> tb;
  for (const Scalar& s : read_events(files[0], file_version)) {
    if (s.tag == "amp/retries") tb[s.step] = s.value;
  }
  int64_t sum = 0, retried = 0, lines = 0;
  for (const nlohmann::json& l : read_lines(dir / "metrics.jsonl", "train")) {
    const int64_t step = l.at("step");
    const int64_t r = l.value("retries", int64_t{0});
    ASSERT_TRUE(tb.count(step)) << "amp/retries at step " << step;
    EXPECT_EQ(tb[step], static_cast<float>(r)) << "step " << step;
    sum += r;
    retried += r > 0;
    ++lines;
  }
  EXPECT_EQ(tb.size(), static_cast<size_t>(lines)) << "one amp/retries per train line";
  EXPECT_GE(retried, 2) << "the high initial scale and the injection both retry";
  EXPECT_EQ(out.summary.at("retries").get<int64_t>(), sum);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ampctl::train
