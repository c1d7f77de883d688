// The Llama / Qwen ops against Hugging Face's formulas run by PyTorch (tests/data/golden/
// llama_ops.json, written by scripts/golden/golden_llama_ops.py): RoPE's inverse frequencies
// (default and llama3 scaling) and cos / sin tables (nn/rope.h), LlamaRMSNorm, SiLU(gate) * up,
// apply_rotary_pos_emb and grouped-query causal attention, forward and backward, all float32 on
// the CPU backend.
//
// Tolerances. The tables: within 2 ulps of torch's floats (torch's pow and cos/sin kernels are
// within an ulp of the correctly rounded value, nn/rope.h's within half an ulp; the llama3
// smoothing adds no more than an ulp of its own). The ops: both sides compute the same formulas in
// float32 with different summation orders, each within (n + 8) 2^-24 of the terms' magnitudes for
// sums of n terms (n <= 48 here, softmax weights summing to 1); the test allows 2^-12 of the
// tensor's largest magnitude per element, well above that and far below what a structural error
// (the wrong half rotated, a wrong kv head, a sign) moves an element by.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/nn/rope.h"
#include "test_util.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

nlohmann::json load_golden() {
  const std::string path = testing::test_data_dir() + "/golden/llama_ops.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

std::vector<float> floats(const nlohmann::json& j) {
  std::vector<float> v;
  for (const auto& e : j) v.push_back(static_cast<float>(e.get<double>()));
  return v;
}

// Distance in ulps between two finite floats of one sign (the tables' entries).
int64_t ulps(float a, float b) {
  const auto ia = static_cast<int64_t>(std::bit_cast<int32_t>(a));
  const auto ib = static_cast<int64_t>(std::bit_cast<int32_t>(b));
  return ia > ib ? ia - ib : ib - ia;
}

void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& torch) {
  ASSERT_EQ(got.size(), torch.size()) << what;
  double scale = 0;
  for (float v : torch) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  ErrorBudget b;
  for (size_t i = 0; i < got.size(); ++i) b.add(i, got[i], torch[i], scale * 0x1p-12);
  EXPECT_TRUE(b.ok()) << what << ": " << b.report();
}

TEST(LlamaOpsGolden, RopeInverseFrequenciesAreHuggingFaces) {
  const nlohmann::json g = load_golden();
  for (const auto& c : g["rope"]) {
    nn::RopeScaling s;
    if (!c["llama3"].is_null()) {
      s.enabled = true;
      s.factor = c["llama3"][0].get<double>();
      s.low_freq_factor = c["llama3"][1].get<double>();
      s.high_freq_factor = c["llama3"][2].get<double>();
      s.original_max_position_embeddings = c["llama3"][3].get<int64_t>();
    }
    const std::vector<float> got =
        nn::rope_inv_freq(c["head_dim"].get<int64_t>(), c["theta"].get<double>(), s);
    const std::vector<float> want = floats(c["inv_freq"]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(ulps(got[i], want[i]), 2) << c["name"].get<std::string>() << " inv_freq[" << i
                                          << "]: " << got[i] << " vs torch " << want[i];
    }
  }
}

TEST(LlamaOpsGolden, RopeTablesAreHuggingFaces) {
  const nlohmann::json g = load_golden()["rope_tables"];
  nn::RopeScaling s{true, 4.0, 1.0, 4.0, 64};
  const nn::RopeTables t =
      nn::rope_tables(nn::rope_inv_freq(16, 10000.0, s), g["positions"].get<int64_t>());
  const std::vector<float> cos = floats(g["cos"]), sin = floats(g["sin"]);
  ASSERT_EQ(t.cos.size(), cos.size());
  for (size_t i = 0; i < cos.size(); ++i) {
    // Near a zero of cos or sin an ulp of the angle moves the value by more ulps of itself:
    // compare those within 2^-22 absolute (an ulp or two of the angle's own size).
    for (const auto& [got, want, name] :
         {std::tuple{t.cos[i], cos[i], "cos"}, std::tuple{t.sin[i], sin[i], "sin"}}) {
      const bool ok = std::fabs(got - want) <= 0x1p-22 || ulps(got, want) <= 2;
      EXPECT_TRUE(ok) << name << "[" << i << "]: " << got << " vs torch " << want;
    }
  }
}

TEST(LlamaOpsGolden, RmsNormIsLlamaRmsNorm) {
  const nlohmann::json g = load_golden()["rms_norm"];
  auto be = cpu_backend(2);
  const int64_t R = g["rows"], C = g["cols"];
  const Tensor x = upload_values(*be, {R, C}, DType::f32, floats(g["x"]));
  const Tensor w = upload_values(*be, {C}, DType::f32, floats(g["weight"]));
  const Tensor y = be->empty({R, C}, DType::f32), rstd = be->empty({R}, DType::f32);
  be->rms_norm_forward(x, w, y, rstd, static_cast<float>(g["eps"].get<double>()));
  const Tensor dx = be->empty({R, C}, DType::f32), dw = be->zeros({C}, DType::f32);
  be->rms_norm_backward(x, w, rstd, upload_values(*be, {R, C}, DType::f32, floats(g["dy"])), dx, dw,
                        false);
  expect_close("y", download_values(*be, y), floats(g["y"]));
  expect_close("dx", download_values(*be, dx), floats(g["dx"]));
  expect_close("dweight", download_values(*be, dw), floats(g["dweight"]));
}

TEST(LlamaOpsGolden, SwigluIsSiluGateTimesUp) {
  const nlohmann::json g = load_golden()["swiglu"];
  auto be = cpu_backend(2);
  const int64_t R = g["rows"], I = g["width"];
  const std::vector<float> gate = floats(g["gate"]), up = floats(g["up"]);
  std::vector<float> gu(static_cast<size_t>(R * 2 * I));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < I; ++c) {
      gu[static_cast<size_t>(r * 2 * I + c)] = gate[static_cast<size_t>(r * I + c)];
      gu[static_cast<size_t>(r * 2 * I + I + c)] = up[static_cast<size_t>(r * I + c)];
    }
  }
  const Tensor gut = upload_values(*be, {R, 2 * I}, DType::f32, gu);
  const Tensor y = be->empty({R, I}, DType::f32), d = be->empty({R, 2 * I}, DType::f32);
  be->swiglu_forward(gut, y);
  be->swiglu_backward(gut, upload_values(*be, {R, I}, DType::f32, floats(g["dy"])), d);
  const std::vector<float> dv = download_values(*be, d);
  std::vector<float> dgate, dup;
  for (int64_t r = 0; r < R; ++r) {
    dgate.insert(dgate.end(), dv.begin() + r * 2 * I, dv.begin() + r * 2 * I + I);
    dup.insert(dup.end(), dv.begin() + r * 2 * I + I, dv.begin() + (r + 1) * 2 * I);
  }
  expect_close("y", download_values(*be, y), floats(g["y"]));
  expect_close("dgate", dgate, floats(g["dgate"]));
  expect_close("dup", dup, floats(g["dup"]));
}

TEST(LlamaOpsGolden, RopeIsApplyRotaryPosEmb) {
  const nlohmann::json g = load_golden()["rope_apply"];
  auto be = cpu_backend(2);
  const int64_t n = g["n"], t = g["t"], hs = g["hs"], pos0 = g["pos0"];
  nn::RopeScaling s{true, 4.0, 1.0, 4.0, 64};
  const nn::RopeTables tab = nn::rope_tables(nn::rope_inv_freq(hs, 10000.0, s), 64);
  const Tensor cos = be->from_host({64, hs / 2}, DType::f32, tab.cos.data());
  const Tensor sin = be->from_host({64, hs / 2}, DType::f32, tab.sin.data());
  const Tensor x = upload_values(*be, {n, t, hs}, DType::f32, floats(g["x"]));
  const Tensor y = be->empty({n, t, hs}, DType::f32), dx = be->empty({n, t, hs}, DType::f32);
  be->rope_forward(x, cos, sin, y, pos0);
  be->rope_backward(upload_values(*be, {n, t, hs}, DType::f32, floats(g["dy"])), cos, sin, dx, pos0,
                    DType::f32);
  expect_close("y", download_values(*be, y), floats(g["y"]));
  expect_close("dx", download_values(*be, dx), floats(g["dx"]));
}

TEST(LlamaOpsGolden, GroupedQueryAttentionIsRepeatKvAttention) {
  const nlohmann::json g = load_golden()["gqa"];
  auto be = cpu_backend(2);
  const int64_t B = g["batch"], H = g["heads"], Hkv = g["kv_heads"], T = g["t"], hs = g["hs"];
  const Shape qs{B * H, T, hs}, kvs{B * Hkv, T, hs};
  const Tensor q = upload_values(*be, qs, DType::f32, floats(g["q"]));
  const Tensor k = upload_values(*be, kvs, DType::f32, floats(g["k"]));
  const Tensor v = upload_values(*be, kvs, DType::f32, floats(g["v"]));
  const Tensor y = be->empty(qs, DType::f32), dq = be->empty(qs, DType::f32);
  const Tensor dk = be->empty(kvs, DType::f32), dv = be->empty(kvs, DType::f32);
  const AttentionBuffers buf = make_attention_buffers(*be, B * H, T, hs, DType::f32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  be->attention_forward(q, k, v, scale, y, buf);
  be->attention_backward(q, k, v, y, upload_values(*be, qs, DType::f32, floats(g["dy"])), scale, dq,
                         dk, dv, buf);
  expect_close("y", download_values(*be, y), floats(g["y"]));
  expect_close("dq", download_values(*be, dq), floats(g["dq"]));
  expect_close("dk", download_values(*be, dk), floats(g["dk"]));
  expect_close("dv", download_values(*be, dv), floats(g["dv"]));
}

}  // namespace
}  // namespace ampctl::test
