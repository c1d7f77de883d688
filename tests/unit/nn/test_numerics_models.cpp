// Gradient numerics of the GPT and the CNN (nn/numerics.h): every rounding of their backward to
// f16/bf16 goes through the hook. The reference is independent of the hook: the same model,
// uninstrumented, runs on a RoundingProbe (rounding_probe.h), which sees every op that writes a
// lowp tensor and records the f32 values before that rounding. Against it:
//   * grad_amax (unsampled and sampled steps) is exactly the largest |x| the probe saw;
//   * the counts summed over the tensors are exactly the probe's, classified here on the host
//     (values, underflow, subnormal, non-finite, the largest |x|);
//   * per tensor, the values counted are exactly the attribution rule's (own products plus the
//     activation gradients the tensor's layer consumes), from the shapes;
//   * the counted and the amax-only backwards leave every gradient bit as the plain one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ampctl/math/numerics_math.h"
#include "ampctl/nn/models.h"
#include "ampctl/nn/numerics.h"
#include "rounding_probe.h"

namespace ampctl::nn {
namespace {

using probe::RoundingProbe;

// The probe's roundings classified on the host, as numerics::classify counts them.
struct Totals {
  int64_t values = 0, underflow = 0, subnormal = 0, nonfinite = 0;
  float max_abs = 0.0f;
};

Totals classify_all(const RoundingProbe& p) {
  Totals t;
  numerics::Partial part;
  for (const probe::Rounding& r : p.roundings()) {
    for (float x : r.pre) {
      const uint16_t b = r.lowp == DType::f16 ? float_to_half_bits(x) : float_to_bf16_bits(x);
      numerics::classify(x, b, r.lowp == DType::f16, part);
      if (std::isfinite(x)) t.max_abs = std::max(t.max_abs, std::fabs(x));
    }
  }
  t.values = part.values;
  t.underflow = part.underflow;
  t.subnormal = part.subnormal;
  t.nonfinite = part.nonfinite;
  return t;
}

std::vector<float> download_all(Backend& be, const Tensor& t) {
  std::vector<float> out(t.numel());
  be.download(out.data(), t);
  return out;
}

// One training step's forward, loss and backward (the probe armed around loss and backward).
struct Step {
  Tensor input, targets;
  int64_t batch = 0, rows = 0;
};

std::vector<float> run_step(Backend& be, Model& m, const Step& s, double scale,
                            RoundingProbe* probe) {
  Tensor loss = be.zeros({1}, DType::f32);
  Tensor gs = be.zeros({1}, DType::f32);
  be.fill(gs, scale);
  m.zero_grad();
  m.forward(s.input, s.batch, true);
  if (probe) probe->arm(true);
  m.loss(s.targets, s.batch, loss, Tensor{}, gs);
  m.backward(s.batch);
  if (probe) probe->arm(false);
  return download_all(be, m.grads());
}

struct Case {
  DType lowp;
  double scale;
  bool flushes = false;  // the case must flush some values (underflow > 0)
};

// The model twice (on the probe, plain; on a CPU backend, with the hook), checked as the file's
// comment says. expected_values: per tensor name, the values its row must count.
template <typename Make>
void check_model(const Case& c, Make make, const std::function<Step(Backend&)>& batch,
                 const std::map<std::string, int64_t>& expected_values) {
  RoundingProbe pb(1);
  std::unique_ptr<Model> plain = make(pb, false);
  const Step ps = batch(pb);
  const std::vector<float> want_grads = run_step(pb, *plain, ps, c.scale, &pb);
  EXPECT_TRUE(pb.unexpected().empty()) << pb.unexpected().front();
  const Totals want = classify_all(pb);
  ASSERT_GT(want.values, 0);
  ASSERT_GT(want.max_abs, 0.0f);

  for (bool count : {false, true}) {
    SCOPED_TRACE(count ? "sampled" : "unsampled");
    std::unique_ptr<Backend> be = make_cpu_backend(1);
    std::unique_ptr<Model> m = make(*be, true);
    ASSERT_TRUE(m->roundings_instrumented());
    GradNumerics& n = *m->numerics();
    const Step s = batch(*be);
    n.begin(count);
    const std::vector<float> grads = run_step(*be, *m, s, c.scale, nullptr);
    n.end();
    ASSERT_EQ(grads.size(), want_grads.size());
    EXPECT_EQ(std::memcmp(grads.data(), want_grads.data(), grads.size() * sizeof(float)), 0)
        << "the hook changed a gradient bit";
    float amax[numerics::kAmaxWords];
    be->download(amax, n.amax());
    EXPECT_EQ(amax[0], want.max_abs);
    EXPECT_EQ(amax[1], 0.0f);
    if (!count) continue;
    std::vector<int64_t> rows;
    n.read(rows);
    const std::vector<FlatLayout::Entry>& entries = m->layout().entries();
    ASSERT_EQ(rows.size(), entries.size() * numerics::kWidth);
    Totals got;
    int64_t max_bits = 0;
    for (size_t e = 0; e < entries.size(); ++e) {
      const int64_t* row = rows.data() + e * numerics::kWidth;
      got.values += row[numerics::kValues];
      got.underflow += row[numerics::kUnderflow];
      got.subnormal += row[numerics::kSubnormal];
      got.nonfinite += row[numerics::kNonfinite];
      max_bits = std::max(max_bits, row[numerics::kMaxBits]);
      const auto it = expected_values.find(entries[e].name);
      ASSERT_NE(it, expected_values.end()) << entries[e].name;
      EXPECT_EQ(row[numerics::kValues], it->second) << entries[e].name;
    }
    EXPECT_EQ(got.values, want.values);
    EXPECT_EQ(got.underflow, want.underflow);
    EXPECT_EQ(got.subnormal, want.subnormal);
    EXPECT_EQ(got.nonfinite, want.nonfinite);
    const auto bits = static_cast<uint32_t>(max_bits);
    float mx;
    std::memcpy(&mx, &bits, sizeof mx);
    EXPECT_EQ(mx, want.max_abs);
    if (c.flushes) {
      EXPECT_GT(want.underflow, 0) << "the case exercises flushing";
    }
  }
}

// ---- the GPT ----

struct GptCfg {
  int64_t L = 2, H = 2, C = 16, T = 8, V = 11, B = 2;
  bool tie = true;
  double dropout = 0.0;
};

ModelOptions gpt_options(const GptCfg& g, DType lowp, bool numerics) {
  ModelOptions o;
  o.type = nn::ModelType::gpt;
  o.compute = lowp;
  o.precision = lowp == DType::f16 ? "fp16" : "bf16";
  o.loss = LossKind::cross_entropy;
  o.in_features = o.out_features = g.V;
  o.max_batch = g.B;
  o.seed = 7;
  o.numerics = numerics;
  o.gpt.n_layer = g.L;
  o.gpt.n_head = g.H;
  o.gpt.n_embd = g.C;
  o.gpt.block_size = g.T;
  o.gpt.dropout = g.dropout;
  o.gpt.bias = true;
  o.gpt.tie_embeddings = g.tie;
  return o;
}

// The values each tensor counts (nn/numerics.h's rules on Gpt::backward): a Linear its dW and
// db plus the activation gradients rounded since the previous claim; a LayerNorm weight the
// input gradient it reads; wpe and the LayerNorm biases nothing (f32 only).
std::map<std::string, int64_t> gpt_expected(const GptCfg& g) {
  const int64_t N = g.B * g.T, C = g.C, V = g.V, att = g.B * g.H * g.T * g.T;
  const int64_t drop = g.dropout > 0.0 ? N * C : 0;  // a residual dropout's dx
  std::map<std::string, int64_t> e;
  e[g.tie ? "transformer.wte.weight" : "lm_head.weight"] = V * C + N * V;
  if (!g.tie) e["transformer.wte.weight"] = 0;
  e["transformer.wpe.weight"] = 0;
  e["transformer.ln_f.weight"] = N * C;
  e["transformer.ln_f.bias"] = 0;
  for (int64_t i = 0; i < g.L; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    e[p + "mlp.c_proj.weight"] = N * C + drop + C * 4 * C;
    e[p + "mlp.c_proj.bias"] = C;
    e[p + "mlp.c_fc.weight"] = 2 * N * 4 * C + 4 * C * C;  // d4a, d4b; dW
    e[p + "mlp.c_fc.bias"] = 4 * C;
    e[p + "ln_2.weight"] = N * C;
    e[p + "ln_2.bias"] = 0;
    e[p + "attn.c_proj.weight"] = N * C + drop + C * C;
    e[p + "attn.c_proj.bias"] = C;
    // c_proj's dx, datt, dv, g, dscores, dq, dk; dW.
    e[p + "attn.c_attn.weight"] = N * C + 3 * att + 3 * N * C + 3 * C * C;
    e[p + "attn.c_attn.bias"] = 3 * C;
    e[p + "ln_1.weight"] = N * C;
    e[p + "ln_1.bias"] = 0;
  }
  return e;
}

std::function<Step(Backend&)> gpt_batch(const GptCfg& g) {
  return [g](Backend& be) {
    std::vector<int32_t> tokens(static_cast<size_t>(g.B * g.T)), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 5 + 3) % static_cast<size_t>(g.V));
      targets[i] = static_cast<int32_t>((i * 7 + 1) % static_cast<size_t>(g.V));
    }
    Step s;
    s.input = be.from_host({g.B, g.T}, DType::i32, tokens.data());
    s.targets = be.from_host({g.B * g.T}, DType::i32, targets.data());
    s.batch = g.B;
    return s;
  };
}

class GptNumerics : public ::testing::TestWithParam<Case> {};

TEST_P(GptNumerics, EveryRoundingIsCountedAndTheAmaxIsTheProbesMax) {
  const Case c = GetParam();
  for (const GptCfg& g : {GptCfg{}, GptCfg{1, 2, 16, 8, 11, 2, false, 0.25}}) {
    SCOPED_TRACE(g.dropout > 0 ? "dropout, untied head" : "attention op, tied head");
    check_model(
        c,
        [&](Backend& be, bool numerics) -> std::unique_ptr<Model> {
          return std::make_unique<Gpt>(be, gpt_options(g, c.lowp, numerics));
        },
        gpt_batch(g), gpt_expected(g));
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, GptNumerics,
                         ::testing::Values(Case{DType::f16, 1.0, true}, Case{DType::f16, 0x1p12},
                                           Case{DType::bf16, 1.0}));

// ---- the CNN ----

ModelOptions cnn_options(DType lowp, bool numerics) {
  ModelOptions o;
  o.type = nn::ModelType::cnn;
  o.compute = lowp;
  o.precision = lowp == DType::f16 ? "fp16" : "bf16";
  o.loss = LossKind::cross_entropy;
  o.in_features = 1 * 8 * 8;
  o.out_features = 3;
  o.max_batch = 3;
  o.seed = 5;
  o.numerics = numerics;
  o.cnn.conv = {{4, 3}, {4, 3}};
  o.cnn.pool = 2;
  o.cnn.batch_norm = true;
  o.cnn.hidden = {8};
  o.cnn.channels = 1;
  o.cnn.height = 8;
  o.cnn.width = 8;
  return o;
}

// features: 0 conv(1->4) 1 bn 2 relu 3 pool | 4 conv(4->4) 5 bn 6 relu 7 pool; classifier:
// 0 flatten 1 Linear(16, 8) 2 relu 3 Linear(8, 3). Per tensor: its dW (db) and the sites
// rounded since the previous claim (a pooling's and an activation's dx go to the next layer
// with a parameter).
std::map<std::string, int64_t> cnn_expected() {
  const int64_t N = 3, a0 = N * 4 * 8 * 8, p0 = N * 4 * 4 * 4, a1 = N * 4 * 4 * 4,
                p1 = N * 4 * 2 * 2;
  std::map<std::string, int64_t> e;
  e["features.0.weight"] = 4 * 1 * 9 + a0;  // dW; bn0's dx
  e["features.1.weight"] = p0 + a0 + a0;    // conv1's dx, pool0's dx, relu's dx
  e["features.1.bias"] = 0;
  e["features.4.weight"] = 4 * 4 * 9 + a1;  // dW; bn1's dx
  e["features.5.weight"] = p1 + a1 + a1;    // Linear's dx, pool1's dx, relu's dx
  e["features.5.bias"] = 0;
  e["classifier.1.weight"] = 8 * 16 + N * 8 * 2;  // dW; Linear(8, 3)'s dx, relu's dx
  e["classifier.1.bias"] = 8;
  e["classifier.3.weight"] = 3 * 8 + N * 3;  // dW; dlogits
  e["classifier.3.bias"] = 3;
  return e;
}

Step cnn_batch(Backend& be) {
  std::vector<float> x(3 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 23)) / 8.0f - 1.0f;
  std::vector<int32_t> y{0, 2, 1};
  Step s;
  s.input = be.from_host({3, 1, 8, 8}, DType::f32, x.data());
  s.targets = be.from_host({3}, DType::i32, y.data());
  s.batch = 3;
  return s;
}

class CnnNumerics : public ::testing::TestWithParam<Case> {};

TEST_P(CnnNumerics, EveryRoundingIsCountedAndTheAmaxIsTheProbesMax) {
  const Case c = GetParam();
  check_model(
      c,
      [&](Backend& be, bool numerics) -> std::unique_ptr<Model> {
        return std::make_unique<Cnn>(be, cnn_options(c.lowp, numerics));
      },
      cnn_batch, cnn_expected());
}

INSTANTIATE_TEST_SUITE_P(Scales, CnnNumerics,
                         ::testing::Values(Case{DType::f16, 1.0}, Case{DType::f16, 0x1p-12, true},
                                           Case{DType::bf16, 1.0}));

}  // namespace
}  // namespace ampctl::nn
