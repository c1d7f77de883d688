// The GPT (nn/models/gpt.h) on the CPU backend against the fp64 emulation of gpt_reference.h,
// in fp32, fp16 and bf16, and its structure: nanoGPT's names and shapes, the initialisation's
// statistics, dropout replay, shorter contexts.
//
// Bounds: every element within 2 D (D: gpt_reference.h's bound with lo = 2 u_lowp per store to
// the compute dtype, a possible one-ulp flip where the model's fp32 summation order puts a value
// on the other side of a rounding boundary; op = u32 per fp32 operation). And, since a flip
// needs the fp32 difference to straddle a boundary (probability about K u32 / u_lowp per
// element), most elements must also be within min(2 D0, 64 u32 max|tensor|), D0 the same bound
// with lo = 0 (fp32 order alone; the second term caps it at fp32-order agreement, since the
// first-order D0 of a deep stack is loose): for a tensor of the compute dtype that is bitwise
// equality. Were a rounding point missing, added or moved, nearly every element would be off by
// up to half an ulp of the compute dtype.
// The share required is 3/4 for the logits. The gradients mix every position (one flip in the
// forward moves every weight gradient a little, and with order-1 parameters fp16 flips a few
// percent of the logits), so in fp16/bf16 they are held to 2 D alone; in fp32, where flips are
// at fp32's level, to the 3/4 share as well. Checked: moving one rounding point (the scaled
// scores' second rounding, round_scaled = false) drops the fp16 logits to ~53% within the tight
// bound, against ~93% for the model as it is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "ampctl/nn/models/gpt.h"
#include "gpt_reference.h"
#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using gptref::E;

ModelOptions gpt_options(const gptref::Config& c, DType compute, int64_t max_batch) {
  ModelOptions o;
  o.type = nn::ModelType::gpt;
  o.compute = compute;
  o.precision = compute == DType::f32 ? "fp32" : compute == DType::f16 ? "fp16" : "bf16";
  o.in_features = o.out_features = c.vocab;
  o.max_batch = max_batch;
  o.seed = c.seed;
  o.gpt.n_layer = c.n_layer;
  o.gpt.n_head = c.n_head;
  o.gpt.n_embd = c.n_embd;
  o.gpt.block_size = c.block_size;
  o.gpt.dropout = c.dropout;
  o.gpt.bias = c.bias;
  o.gpt.tie_embeddings = c.tie;
  return o;
}

std::map<std::string, std::vector<double>> params_of(Model& m) {
  return ref::read_named(m, m.params());
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(int64_t rows, int64_t T, int64_t V, uint64_t seed) {
  Batch b;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < rows * T; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(V)));
    b.targets.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(V)));
  }
  return b;
}

struct ModelRun {
  std::vector<double> logits;
  double loss = 0.0;
  std::map<std::string, std::vector<double>> grads;
};

// One forward/loss/backward of B sequences of T positions; the input buffer has one more
// sequence than used (the model reads the first B).
ModelRun run_model(Model& m, const Batch& b, int64_t B, int64_t T, bool training,
                   double grad_scale) {
  Backend& be = m.backend();
  std::vector<int32_t> tok(b.tokens.begin(), b.tokens.begin() + B * T);
  tok.resize(static_cast<size_t>((B + 1) * T), 0);
  const Tensor x = be.from_host({B + 1, T}, DType::i32, tok.data());
  std::vector<int32_t> tg(b.targets.begin(), b.targets.begin() + B * T);
  const Tensor y = be.from_host({B * T}, DType::i32, tg.data());
  Tensor loss = be.zeros({1}, DType::f32);
  Tensor scale = be.zeros({1}, DType::f32);
  be.fill(scale, grad_scale);
  ModelRun r;
  m.zero_grad();
  r.logits = ref::read_values(be, m.forward(x, B, training));
  m.loss(y, B, loss, Tensor{}, scale);
  m.backward(B);
  r.loss = be.read_scalar_f32(loss);
  r.grads = ref::read_named(m, m.grads());
  return r;
}

struct Check {
  double worst_ratio = 0.0;  // max |diff| / (2 D)
  size_t worst = 0;
  double within_d0 = 1.0;  // share within 2 D0
};

Check compare(const std::string& what, const std::vector<double>& model, const gptref::T& emu,
              const gptref::T& emu0) {
  EXPECT_EQ(model.size(), emu.size()) << what;
  Check c;
  size_t ok0 = 0;
  // fp32-order agreement: 64 u32 of the tensor's largest magnitude (a K <= 64-term sum's order
  // moves a value by at most K u32 sum |terms|). A value of the compute dtype that agrees this
  // well is bitwise equal unless tiny; a misplaced rounding moves it by ~u_lowp |v|.
  double scale = 0.0;
  for (const E& e : emu) scale = std::max(scale, std::abs(e.v));
  const double tight = 64.0 * 0x1p-24 * scale;
  for (size_t i = 0; i < model.size() && i < emu.size(); ++i) {
    const double diff = std::abs(model[i] - emu[i].v);
    const double budget = 2.0 * emu[i].d;
    const double ratio = budget > 0.0 ? diff / budget : (diff == 0.0 ? 0.0 : INFINITY);
    if (ratio > c.worst_ratio) c.worst_ratio = ratio, c.worst = i;
    if (diff <= std::min(2.0 * emu0[i].d, tight)) ++ok0;
    if (!(diff <= budget)) {
      ADD_FAILURE() << what << "[" << i << "]: model " << model[i] << ", emulation " << emu[i].v
                    << ", |diff| " << diff << " > 2 D = " << budget;
      break;
    }
  }
  c.within_d0 = model.empty() ? 1.0 : static_cast<double>(ok0) / static_cast<double>(model.size());
  std::printf("  %-38s worst [%zu] %.3g of 2D, %.0f%% within 2 D0\n", what.c_str(), c.worst,
              c.worst_ratio, 100.0 * c.within_d0);
  return c;
}

struct PrecisionCase {
  const char* name;
  DType dtype;
  gptref::Format format;
  double u;  // the compute dtype's unit roundoff
};

class GptEmulation : public ::testing::TestWithParam<PrecisionCase> {};

void check_against_emulation(const gptref::Config& cfg, const PrecisionCase& pc, int64_t max_batch,
                             int64_t B, int64_t T, bool training) {
  auto be = make_cpu_backend(1);
  Gpt model(*be, gpt_options(cfg, pc.dtype, max_batch));
  // Parameters of order 1 instead of GPT-2's 0.02 (matrices N(0, 0.35), biases N(0, 0.2),
  // LayerNorm weights 1 + N(0, 0.2)): at the initial scale the attention scores are ~1e-4 and
  // a misplaced rounding of them would vanish in the next one; here every rounding point shows.
  {
    std::mt19937_64 rng(cfg.seed + 101);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> host(model.layout().total(), 0.0f);
    for (const auto& e : model.layout().entries()) {
      const bool norm = e.name.find(".ln_") != std::string::npos;
      for (size_t i = 0; i < e.numel; ++i) {
        const float z = nd(rng);
        host[e.offset + i] = e.shape.size() >= 2                   ? 0.35f * z
                             : norm && e.name.ends_with(".weight") ? 1.0f + 0.2f * z
                                                                   : 0.2f * z;
      }
    }
    be->upload(model.params(), host.data(), host.size() * sizeof(float));
    model.sync_lowp();
  }
  const auto params = params_of(model);
  const Batch batch = make_batch(max_batch, cfg.block_size, cfg.vocab, cfg.seed + 17);
  Batch used;
  // The first B sequences, each cut to T positions.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      used.tokens.push_back(batch.tokens[b * cfg.block_size + t]);
      used.targets.push_back(batch.targets[b * cfg.block_size + t]);
    }
  }
  const double grad_scale = pc.dtype == DType::f16 ? 1024.0 : 1.0;
  const uint64_t first_call = model.rng_position();
  const ModelRun got = run_model(model, used, B, T, training, grad_scale);

  gptref::Coef flip, none;
  flip.lo = pc.dtype == DType::f32 ? 2.0 * 0x1p-24 : 2.0 * pc.u;
  none.lo = pc.dtype == DType::f32 ? 2.0 * 0x1p-24 : 0.0;
  const gptref::Result want =
      gptref::Emulator(cfg, pc.format, flip, params)
          .run(used.tokens, used.targets, B, T, training, grad_scale, first_call);
  const gptref::Result want0 =
      gptref::Emulator(cfg, pc.format, none, params)
          .run(used.tokens, used.targets, B, T, training, grad_scale, first_call);

  std::printf("%s: B=%lld T=%lld\n", pc.name, static_cast<long long>(B), static_cast<long long>(T));
  const Check lc = compare("logits", got.logits, want.logits, want0.logits);
  EXPECT_GE(lc.within_d0, 0.75) << "logits: a rounding point differs from the emulation's";
  const Check sc = compare("loss", {got.loss}, {want.loss}, {want0.loss});
  (void)sc;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (const auto& [name, g] : got.grads) {
    const Check gc = compare("grad " + name, g, want.grads.at(name), want0.grads.at(name));
    if (pc.dtype == DType::f32) {
      EXPECT_GE(gc.within_d0, 0.75) << name;
    }
  }
}

TEST_P(GptEmulation, MatchesTheFp64EmulationWithDerivedBounds) {
  gptref::Config cfg;  // 2 layers, 2 heads, 16 wide, T 8, V 11
  check_against_emulation(cfg, GetParam(), 3, 2, 8, /*training=*/true);
}

TEST_P(GptEmulation, ShorterContextAndPartialBatch) {
  gptref::Config cfg;
  cfg.seed = 5;
  check_against_emulation(cfg, GetParam(), 3, 1, 5, /*training=*/true);
}

TEST_P(GptEmulation, DropoutUntiedNoBias) {
  gptref::Config cfg;
  cfg.seed = 9;
  cfg.dropout = 0.2;
  cfg.bias = false;
  cfg.tie = false;
  check_against_emulation(cfg, GetParam(), 2, 2, 8, /*training=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, GptEmulation,
    ::testing::Values(PrecisionCase{"fp32", DType::f32, gptref::Format::f32, 0x1p-24},
                      PrecisionCase{"fp16", DType::f16, gptref::Format::f16, 0x1p-11},
                      PrecisionCase{"bf16", DType::bf16, gptref::Format::bf16, 0x1p-8}),
    [](const ::testing::TestParamInfo<PrecisionCase>& i) { return std::string(i.param.name); });

// nanoGPT's state_dict keys, in its order, with its shapes.
TEST(Gpt, ParameterNamesAndShapesAreNanoGpts) {
  auto be = make_cpu_backend(1);
  gptref::Config cfg;
  cfg.n_layer = 1;
  Gpt tied(*be, gpt_options(cfg, DType::f32, 1));
  std::vector<std::string> names;
  for (const auto& e : tied.layout().entries()) names.push_back(e.name + shape_str(e.shape));
  const std::vector<std::string> want = {
      "transformer.wte.weight[11, 16]",
      "transformer.wpe.weight[8, 16]",
      "transformer.h.0.ln_1.weight[16]",
      "transformer.h.0.ln_1.bias[16]",
      "transformer.h.0.attn.c_attn.weight[48, 16]",
      "transformer.h.0.attn.c_attn.bias[48]",
      "transformer.h.0.attn.c_proj.weight[16, 16]",
      "transformer.h.0.attn.c_proj.bias[16]",
      "transformer.h.0.ln_2.weight[16]",
      "transformer.h.0.ln_2.bias[16]",
      "transformer.h.0.mlp.c_fc.weight[64, 16]",
      "transformer.h.0.mlp.c_fc.bias[64]",
      "transformer.h.0.mlp.c_proj.weight[16, 64]",
      "transformer.h.0.mlp.c_proj.bias[16]",
      "transformer.ln_f.weight[16]",
      "transformer.ln_f.bias[16]",
  };
  EXPECT_EQ(names, want);
  // nanoGPT's count (get_num_params with non_embedding=False counts wte once when tied).
  EXPECT_EQ(tied.num_params(),
            11 * 16 + 8 * 16 + (2 * 32 + 48 * 17 + 16 * 17 + 64 * 17 + 16 * 65) + 32);
  cfg.bias = false;
  cfg.tie = false;
  Gpt untied(*be, gpt_options(cfg, DType::f32, 1));
  names.clear();
  for (const auto& e : untied.layout().entries()) names.push_back(e.name);
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(
      std::count_if(names.begin(), names.end(),
                    [](const std::string& n) { return n.find(".bias") != std::string::npos; }),
      0);
  EXPECT_NE(untied.summary().find("bias=False"), std::string::npos);
}

// GPT-2's initialisation: N(0, 0.02), c_proj N(0, 0.02 / sqrt(2 L)), zero biases, unit LayerNorm
// weights. The sample statistics of n draws: the mean within 5 sigma / sqrt(n), the standard
// deviation within 5 sqrt(1 / (2 n)) relative (the normal's sampling variance of s).
TEST(Gpt, InitialisationIsGpt2s) {
  auto be = make_cpu_backend(1);
  gptref::Config cfg;
  cfg.n_layer = 3;
  cfg.n_embd = 64;
  cfg.n_head = 4;
  cfg.vocab = 300;
  cfg.block_size = 32;
  Gpt m(*be, gpt_options(cfg, DType::f32, 1));
  const auto p = params_of(m);
  auto stats = [](const std::vector<double>& v) {
    const double n = static_cast<double>(v.size());
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
    double ss = 0.0;
    for (double x : v) ss += (x - mean) * (x - mean);
    return std::make_pair(mean, std::sqrt(ss / n));
  };
  for (const auto& [name, v] : p) {
    if (name.find("ln_") != std::string::npos && name.ends_with(".weight")) {
      for (double x : v) ASSERT_EQ(x, 1.0) << name;
      continue;
    }
    if (name.ends_with(".bias")) {
      for (double x : v) ASSERT_EQ(x, 0.0) << name;
      continue;
    }
    const double want = name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(6.0) : 0.02;
    const auto [mean, sd] = stats(v);
    const double n = static_cast<double>(v.size());
    EXPECT_LT(std::abs(mean), 5.0 * want / std::sqrt(n)) << name;
    EXPECT_LT(std::abs(sd / want - 1.0), 5.0 * std::sqrt(1.0 / (2.0 * n))) << name;
  }
  // Tensors draw from their own streams: two of the same shape differ.
  EXPECT_NE(p.at("transformer.h.0.attn.c_proj.weight"), p.at("transformer.h.1.attn.c_proj.weight"));
  // The same seed gives the same bits; another seed other values.
  Gpt again(*be, gpt_options(cfg, DType::f32, 1));
  EXPECT_EQ(params_of(again), p);
  cfg.seed = 1;
  Gpt other(*be, gpt_options(cfg, DType::f32, 1));
  EXPECT_NE(params_of(other).at("transformer.wte.weight"), p.at("transformer.wte.weight"));
}

// Dropout draws a new mask per application; rewinding the RNG replays the same masks bit for
// bit (how a resumed or restarted step reproduces), and evaluation draws nothing.
TEST(Gpt, DropoutReplaysAfterRewindAndEvalDrawsNothing) {
  auto be = make_cpu_backend(1);
  gptref::Config cfg;
  cfg.dropout = 0.3;
  Gpt m(*be, gpt_options(cfg, DType::f16, 2));
  const Batch b = make_batch(2, 8, cfg.vocab, 3);
  const uint64_t start = m.rng_position();
  const ModelRun a = run_model(m, b, 2, 8, true, 1.0);
  EXPECT_EQ(m.rng_position(), start + 1 + 3 * 2);  // the embedding's, then 3 per block
  const ModelRun a2 = run_model(m, b, 2, 8, true, 1.0);
  EXPECT_NE(a.logits, a2.logits);
  m.rewind_rng(start);
  const ModelRun a3 = run_model(m, b, 2, 8, true, 1.0);
  EXPECT_EQ(a.logits, a3.logits);
  EXPECT_EQ(a.grads, a3.grads);
  const uint64_t before = m.rng_position();
  run_model(m, b, 2, 8, false, 1.0);
  EXPECT_EQ(m.rng_position(), before);
  // rng_state round trip.
  Gpt n(*be, gpt_options(cfg, DType::f16, 2));
  n.set_rng_state(m.rng_state());
  EXPECT_EQ(n.rng_position(), m.rng_position());
  EXPECT_THROW(n.set_rng_state(nlohmann::json{{"seed", 1}}), Error);
}

TEST(Gpt, RefusesBadShapesAndOptions) {
  auto be = make_cpu_backend(1);
  gptref::Config cfg;
  cfg.n_head = 3;  // does not divide 16
  EXPECT_THROW(Gpt(*be, gpt_options(cfg, DType::f32, 1)), Error);
  cfg.n_head = 2;
  cfg.dropout = 1.0;
  EXPECT_THROW(Gpt(*be, gpt_options(cfg, DType::f32, 1)), Error);
  cfg.dropout = 0.0;
  Gpt m(*be, gpt_options(cfg, DType::f32, 2));
  std::vector<int32_t> ids(3 * 9, 1);
  const Tensor too_long = be->from_host({3, 9}, DType::i32, ids.data());
  EXPECT_THROW(m.forward(too_long, 2, false), Error);  // T' > block_size
  const Tensor ok = be->from_host({3, 8}, DType::i32, ids.data());
  EXPECT_THROW(m.forward(ok, 3, false), Error);  // B' > max_batch
  const Tensor f = be->zeros({2, 8}, DType::f32);
  EXPECT_THROW(m.forward(f, 2, false), Error);  // not ids
  ids[5] = 11;                                  // == vocab
  const Tensor bad = be->from_host({3, 8}, DType::i32, ids.data());
  EXPECT_THROW(m.forward(bad, 2, false), Error);
  EXPECT_THROW(m.backward(2), Error);  // no seeded loss
}

}  // namespace
}  // namespace ampctl::nn
