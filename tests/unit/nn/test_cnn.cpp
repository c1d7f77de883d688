// The CNN (models/cnn.h) against PyTorch: tests/data/golden/cnn_batchnorm.json, written by
// scripts/golden/golden_cnn.py, holds for one tiny CNN with BatchNorm, run by torch from ampctl's
// initial weights (this test, with AMPCTL_GOLDEN_CNN_INIT set, writes them as `ampctl export`
// does; the script loads them with load_state_dict(strict=True)), and one batch: the logits, the
// loss and every parameter gradient, and BatchNorm's running statistics after 3 SGD steps. The
// test rebuilds the same initialisation from the seed (checked bitwise against the weights the
// golden file was made from) and, in fp32, every value must agree within a bound derived from the
// float arithmetic of the longest chain: the BatchNorm sums over M = 4 * 6 * 6 = 144 values, then
// the conv's 18 products, the head's and a few roundings, so |err| <= 8 gamma_200 max|tensor|
// (gamma_n = n 2^-24 / (1 - n 2^-24)), for both sides' orders. Also: the names are exactly those of
// the PyTorch module's state_dict, and the summary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/nn/models.h"
#include "ampctl/nn/models/cnn.h"
#include "test_util.h"

namespace ampctl::nn {
namespace {

constexpr uint64_t kSeed = 7;  // the initialisation the golden file was made from

nlohmann::json golden() {
  std::ifstream in(ampctl::testing::test_data_dir() + "/golden/cnn_batchnorm.json");
  EXPECT_TRUE(in.good()) << "cnn_batchnorm.json not found";
  return nlohmann::json::parse(in);
}

ModelOptions tiny_options(const nlohmann::json& g) {
  ModelOptions o;
  o.type = nn::ModelType::cnn;
  o.compute = DType::f32;
  o.loss = LossKind::cross_entropy;
  o.in_features = 2 * 6 * 6;
  o.out_features = g.at("classes").get<int64_t>();
  o.max_batch = 4;
  o.seed = kSeed;
  o.cnn.conv = {{3, 3}};
  o.cnn.pool = 2;
  o.cnn.batch_norm = true;
  o.cnn.hidden = {5};
  o.cnn.channels = 2;
  o.cnn.height = 6;
  o.cnn.width = 6;
  return o;
}

std::vector<float> floats(const nlohmann::json& j) {
  return j.get<std::vector<float>>();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const double n = 200, u = 0x1p-24;
  const double bound = 8 * (n * u / (1 - n * u)) * scale;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), bound)
        << what << "[" << i << "]: got " << got[i] << ", PyTorch " << want[i];
  }
}

std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  b.download(v.data(), t);
  return v;
}

TEST(Cnn, MatchesPyTorchOutputsGradientsAndRunningStats) {
  const nlohmann::json g = golden();
  auto be = make_cpu_backend(2);
  auto model = build_model(*be, tiny_options(g));
  if (const char* out = std::getenv("AMPCTL_GOLDEN_CNN_INIT")) {
    // The initial weights as `ampctl export` writes them (parameters, then buffers, as a
    // checkpoint holds them), for scripts/golden/golden_cnn.py.
    checkpoint::CheckpointData data;
    data.config = {{"model", {{"type", "cnn"}}}};
    for (const auto& [name, t] : model->state_tensors()) {
      data.model.push_back(checkpoint::from_host_tensor(name, be->to_host(t)));
    }
    for (const auto& [name, t] : model->state_buffers()) {
      data.model.push_back(checkpoint::from_host_tensor(name, be->to_host(t)));
    }
    checkpoint::export_safetensors(data, out);
    GTEST_SKIP() << "wrote the initial weights to " << out;
  }
  // The names are the PyTorch module's state_dict keys, buffers included.
  std::set<std::string> ours, theirs;
  for (const auto& [name, t] : model->state_tensors()) ours.insert(name);
  for (const auto& [name, t] : model->state_buffers()) ours.insert(name);
  for (const auto& k : g.at("state_dict_keys")) theirs.insert(k.get<std::string>());
  EXPECT_EQ(ours, theirs);

  // The seeded initialisation is, bit for bit, the one the golden file was computed from.
  for (const auto& [name, t] : model->state_tensors()) {
    const std::vector<float> want = floats(g.at("params").at(name));
    const std::vector<float> got = download(*be, t);
    ASSERT_EQ(got.size(), want.size()) << name;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << name << ": ampctl's init from seed " << kSeed << " is not the golden file's";
  }
  const std::vector<float> xv = floats(g.at("x"));
  const std::vector<int32_t> labels = g.at("labels").get<std::vector<int32_t>>();
  Tensor x = be->from_host({4, 2, 6, 6}, DType::f32, xv.data());
  Tensor y = be->from_host({4}, DType::i32, labels.data());
  Tensor loss = be->zeros({1}, DType::f32);
  Tensor one = be->empty({1}, DType::f32);
  be->fill(one, 1.0);

  auto step = [&] {
    model->zero_grad();
    const Tensor& logits = model->forward(x, 4, /*training=*/true);
    model->loss(y, 4, loss, Tensor{}, one);
    model->backward(4);
    return download(*be, logits);
  };
  expect_close(step(), floats(g.at("logits")), "logits");
  expect_close({be->read_scalar_f32(loss)}, {g.at("loss").get<float>()}, "loss");
  const std::vector<Tensor> grads = model->layout().views(model->grads());
  const std::vector<Tensor> params = model->layout().views(model->params());
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string& name = model->layout().entries()[i].name;
    expect_close(download(*be, grads[i]), floats(g.at("grads").at(name)), "grad " + name);
  }
  // Three SGD steps (lr 0.1, p -= lr * g in float, as torch.optim.SGD) on the same batch.
  for (int s = 0; s < 3; ++s) {
    if (s > 0) step();
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> p = download(*be, params[i]), d = download(*be, grads[i]);
      for (size_t k = 0; k < p.size(); ++k) p[k] = p[k] - 0.1f * d[k];
      be->upload(params[i], p.data(), p.size() * sizeof(float));
    }
  }
  const auto buffers = model->state_buffers();
  ASSERT_EQ(buffers.size(), 3u);
  expect_close(download(*be, buffers[0].second), floats(g.at("running_mean")), "running_mean");
  expect_close(download(*be, buffers[1].second), floats(g.at("running_var")), "running_var");
  EXPECT_EQ(be->read_scalar_i32(buffers[2].second), g.at("num_batches_tracked").get<int32_t>());
  EXPECT_EQ(buffers[2].second.rank(), 0u);  // PyTorch's num_batches_tracked is 0-d
}

TEST(Cnn, LayoutNamesAndSummary) {
  const nlohmann::json g = golden();
  auto be = make_cpu_backend(1);
  ModelOptions o = tiny_options(g);
  o.cnn.conv = {{4, 3}, {6, 5}};
  o.cnn.batch_norm = false;
  o.cnn.hidden = {7, 3};
  o.cnn.dropout = 0.25;
  auto model = build_model(*be, o);
  std::vector<std::string> names;
  for (const auto& e : model->layout().entries()) names.push_back(e.name);
  // conv, relu, pool per block; Flatten, (Linear, ReLU, Dropout) per hidden, Linear.
  const std::vector<std::string> expect = {
      "features.0.weight",   "features.0.bias",   "features.3.weight",   "features.3.bias",
      "classifier.1.weight", "classifier.1.bias", "classifier.4.weight", "classifier.4.bias",
      "classifier.7.weight", "classifier.7.bias"};
  EXPECT_EQ(names, expect);
  EXPECT_TRUE(model->state_buffers().empty());
  // 6x6 -> conv 3 (pad 1) 6x6 -> pool 3x3 -> conv 5 (pad 2) 3x3 -> pool 1x1: 6 features.
  EXPECT_EQ(model->layout().entries()[2].shape, (Shape{6, 4, 5, 5}));
  EXPECT_EQ(model->layout().entries()[4].shape, (Shape{7, 6}));
  const std::string s = model->summary();
  EXPECT_NE(s.find("features.0  Conv2d(2, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("MaxPool2d(kernel_size=2, stride=2"), std::string::npos) << s;
  // A pool that shrinks the image to nothing is a config error naming model.pool.
  o.cnn.conv = {{4, 3}, {4, 3}, {4, 3}};
  try {
    build_model(*be, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("model.pool"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ampctl::nn
