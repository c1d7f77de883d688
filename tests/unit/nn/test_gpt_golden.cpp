// The GPT in fp32 against PyTorch, as llm.c's test_gpt2: nanoGPT's GPT class run by torch 1.13
// on the CPU from ampctl's initial weights (scripts/golden/golden_gpt.py, checked in as
// tests/data/golden/gpt_tiny.json): the logits, the loss and every parameter's gradient of one
// batch, and the losses of 10 AdamW steps with nanoGPT's groups (decay_on: matrices).
//
// Tolerances, per element, derived from gpt_reference.h's fp64 emulation of this very forward
// and backward (fp32 format): both ampctl and PyTorch compute the same fp32 graph and differ from
// the emulation only by their fp32 operation orders, each by at most 2 D (D the emulation's
// first-order bound with op = u32 per fp32 operation, lo = 2 u32 per fp32 store), so
//     |ampctl - torch| <= 4 D.
// The AdamW losses: after the parameters moved by the first k updates, to first order
//     |loss_k(ampctl) - loss_k(torch)| <= 4 D_loss + sum_{s<k} lr sum_i |g_i| min(2, 8 D_i/|g_i|),
// g the first step's gradients and D_i their bounds: Adam's update is lr times a function of
// the gradient ratios that is homogeneous of degree 0 in g, so a relative perturbation delta of
// an element's gradients moves its update by at most 2 delta lr (the numerator's and the
// denominator's, in opposite directions), and never by more than 2 lr (a sign flip at
// |g| ~ noise); the loss moves by |dL/dp| per unit of p.
// Each comparison prints its worst element and the share of its budget used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/optim/adam.h"
#include "ampctl/train/build.h"
#include "gpt_reference.h"
#include "nn_reference.h"
#include "test_util.h"

namespace ampctl::nn {
namespace {

constexpr uint64_t kSeed = 7;

gptref::Config golden_config() {
  gptref::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 8;
  c.vocab = 11;
  c.seed = kSeed;
  return c;
}

ModelOptions options_of(const gptref::Config& c, int64_t max_batch) {
  ModelOptions o;
  o.type = nn::ModelType::gpt;
  o.in_features = o.out_features = c.vocab;
  o.max_batch = max_batch;
  o.seed = c.seed;
  o.gpt = {c.n_layer, c.n_head, c.n_embd, c.block_size, c.dropout, c.bias, c.tie};
  return o;
}

nlohmann::json load_golden() {
  const std::string path = testing::test_data_dir() + "/golden/gpt_tiny.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

struct Budget {
  double worst = 0.0;  // max |diff| / tol
  size_t at = 0;
};

Budget within(const std::string& what, const std::vector<double>& got,
              const std::vector<double>& torch, const gptref::T& emu) {
  Budget b;
  EXPECT_EQ(got.size(), torch.size()) << what;
  for (size_t i = 0; i < got.size() && i < torch.size(); ++i) {
    const double tol = 4.0 * emu[i].d;
    const double diff = std::abs(got[i] - torch[i]);
    const double r = tol > 0.0 ? diff / tol : (diff == 0.0 ? 0.0 : INFINITY);
    if (r > b.worst) b.worst = r, b.at = i;
  }
  if (!got.empty() && b.at < torch.size()) {
    std::printf("  %-36s worst [%zu] ampctl %.9g torch %.9g: %.3g%% of 4D = %.3g\n", what.c_str(),
                b.at, got[b.at], torch[b.at], 100.0 * b.worst, 4.0 * emu[b.at].d);
  }
  EXPECT_LE(b.worst, 1.0) << what << "[" << b.at << "]";
  return b;
}

TEST(GptGolden, MatchesNanoGptInPyTorch) {
  const gptref::Config cfg = golden_config();
  auto be = make_cpu_backend(1);
  const int64_t B = 2, T = cfg.block_size;
  Gpt model(*be, options_of(cfg, B));

  if (const char* out = std::getenv("AMPCTL_GOLDEN_GPT_INIT")) {
    // The initial weights as `ampctl export` writes them, for scripts/golden/golden_gpt.py.
    checkpoint::CheckpointData data;
    data.config = {{"model", {{"type", "gpt"}, {"tie_embeddings", true}}}};
    for (const auto& [name, t] : model.state_tensors()) {
      data.model.push_back(checkpoint::from_host_tensor(name, be->to_host(t)));
    }
    checkpoint::export_safetensors(data, out);
    GTEST_SKIP() << "wrote the initial weights to " << out;
  }

  const nlohmann::json g = load_golden();
  ASSERT_EQ(g.at("config").at("n_layer"), cfg.n_layer);
  ASSERT_EQ(g.at("config").at("n_embd"), cfg.n_embd);
  ASSERT_EQ(g.at("config").at("vocab_size"), cfg.vocab);
  ASSERT_EQ(g.at("batch"), B);
  const std::vector<int32_t> tokens = g.at("tokens");
  const std::vector<int32_t> targets = g.at("targets");
  ASSERT_EQ(tokens.size(), static_cast<size_t>(B * T));

  const Tensor x = be->from_host({B, T}, DType::i32, tokens.data());
  const Tensor y = be->from_host({B * T}, DType::i32, targets.data());
  Tensor loss = be->zeros({1}, DType::f32);
  Tensor one = be->zeros({1}, DType::f32);
  be->fill(one, 1.0);
  model.zero_grad();
  const std::vector<double> logits = ref::read_values(*be, model.forward(x, B, true));
  model.loss(y, B, loss, Tensor{}, one);
  model.backward(B);
  const double l0 = be->read_scalar_f32(loss);
  const auto grads = ref::read_named(model, model.grads());

  gptref::Coef coef;
  coef.lo = 2.0 * 0x1p-24;
  const auto params = ref::read_named(model, model.params());
  const gptref::Result emu = gptref::Emulator(cfg, gptref::Format::f32, coef, params)
                                 .run(tokens, targets, B, T, true, 1.0);

  std::printf("ampctl fp32 vs torch %s:\n", g.at("torch").get<std::string>().c_str());
  within("logits", logits, g.at("logits").get<std::vector<double>>(), emu.logits);
  within("loss", {l0}, {g.at("loss").get<double>()}, {emu.loss});
  size_t compared = 0;
  for (const auto& [name, t] : g.at("grads").items()) {
    ASSERT_TRUE(grads.count(name)) << name;
    within("grad " + name, grads.at(name), t.get<std::vector<double>>(), emu.grads.at(name));
    ++compared;
  }
  EXPECT_EQ(compared, grads.size());  // every parameter's gradient

  // ---- 10 AdamW steps with nanoGPT's groups ----
  const nlohmann::json& a = g.at("adamw");
  optim::AdamOptions ao;
  ao.beta1 = a.at("betas")[0];
  ao.beta2 = a.at("betas")[1];
  ao.eps = a.at("eps");
  ao.weight_decay = a.at("weight_decay");
  ao.decoupled = true;
  std::vector<optim::ParamGroup> groups = train::param_groups(model, a.at("lr").get<float>());
  groups[0].lr = a.at("lr").get<double>();
  groups[0].decay_mask = train::matrix_decay_mask(model);
  optim::Adam opt(*be, std::move(groups), ao);
  const std::vector<double> want = a.at("losses");
  // The per-step first-order drift budget: lr sum_i |g_i| min(2, 8 D_i / |g_i|).
  double drift = 0.0;
  for (const auto& [name, gv] : emu.grads) {
    for (const gptref::E& e : gv) {
      drift += std::abs(e.v) * std::min(2.0, e.v != 0.0 ? 8.0 * e.d / std::abs(e.v) : 2.0);
    }
  }
  drift *= a.at("lr").get<double>();
  double worst = 0.0;
  for (size_t k = 0; k < want.size(); ++k) {
    model.zero_grad();
    model.forward(x, B, true);
    model.loss(y, B, loss, Tensor{}, one);
    model.backward(B);
    const double lk = be->read_scalar_f32(loss);
    opt.step();
    const double tol = 4.0 * emu.loss.d + static_cast<double>(k) * drift;
    const double r = std::abs(lk - want[k]) / tol;
    worst = std::max(worst, r);
    std::printf("  adamw step %2zu loss ampctl %.9g torch %.9g: %.3g%% of %.3g\n", k, lk, want[k],
                100.0 * r, tol);
    EXPECT_LE(r, 1.0) << "step " << k;
  }
  EXPECT_LT(want.back(), want.front());  // it trains
}

}  // namespace
}  // namespace ampctl::nn
