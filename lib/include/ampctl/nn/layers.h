// The layers of an MLP, each with PyTorch's parameter names, shapes, initialisation and
// semantics, and autocast's precision (docs/reference.md, "Precision"):
//
//   Linear     y = x W^T + b. lowp operands (the f16/bf16 weight copy, the input already in
//              lowp), fp32 accumulation, lowp output; the LOWP bias is added in float before the
//              one rounding (autocast's addmm). Backward: dW = dY^T X and dB = sum_rows(dY) are
//              rounded to lowp first and then added to the f32 gradients ("the weight-gradient
//              product is rounded to fp16 before it is added to the fp32 gradient");
//              dX = dY W in lowp. In fp32 everything is f32 and dW accumulates in the gemm.
//   Activation relu / gelu (erf) / tanh, lowp in and out.
//   LayerNorm  autocast's fp32 list: the input is widened, statistics and the affine map run in
//              float with the f32 master gamma/beta (never a lowp copy), the output is rounded
//              to lowp (where autocast's next matrix product would cast it); dgamma/dbeta are
//              computed in f32 straight into the f32 gradients. eps = 1e-5.
//   Dropout    training: keep with probability 1 - p, scale kept elements by 1 / (1 - p), the
//              mask from Philox (seed, dropout_stream(call)) regenerated in backward; eval:
//              identity (the input is passed through, nothing is computed).
//   Sequential children numbered as nn.Sequential numbers them ("layers.3" is the fourth).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ampctl/math/nn_math.h"
#include "ampctl/nn/module.h"

namespace ampctl::nn {

// U(-bound, bound) from Philox stream `stream` of `seed`, the init of Linear's and the conv
// layers' weights: (2u - 1) * bound in double, u in [0, 1) with 24 bits, rounded once to float.
// |value| <= float(bound) since rounding is monotonic.
void fill_uniform(std::span<float> out, double bound, uint64_t seed, uint64_t stream);

class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features);

  std::string describe() const override;
  int64_t in_features() const override { return m_in; }
  int64_t out_features() const override { return m_out; }

  void declare(FlatLayout& layout, const std::string& prefix) override;
  // PyTorch's reset_parameters: weight ~ U(-b, b) (kaiming_uniform_ with a = sqrt(5)) and
  // bias ~ U(-b, b), b = 1 / sqrt(in_features); each tensor from its own Philox stream
  // init_stream(entry), element j from draw j: w = float((2u - 1) * b) in double.
  void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const override;
  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  int64_t m_in, m_out;
  size_t m_weight_entry = 0, m_bias_entry = 0;
  Backend* m_backend = nullptr;
  ParamSlot m_weight, m_bias;
  RowViews m_y, m_dx;
  Tensor m_x;          // the last forward's input (a view owned upstream)
  Tensor m_dw_ws;      // lowp [out, in]: dY^T X rounded before it is added (undefined in fp32)
  Tensor m_db_ws;      // act [out]: sum_rows(dY) rounded before it is added
  Tensor m_undefined;  // what backward returns without input_grad
  // Gradient numerics (nn/numerics.h): the f32 outputs of sampled steps.
  const Tensor& backward_counted(const Tensor& dy, int64_t batch);
  GradNumerics* m_numerics = nullptr;
  Tensor m_dw_f32, m_db_f32;
  RowViews m_dx_f32;
  size_t m_dx_site = 0;
};

class Activation final : public Module {
 public:
  Activation(ActivationKind kind, int64_t features);

  std::string describe() const override;  // "ReLU()", "GELU(approximate='none')", "Tanh()"
  int64_t in_features() const override { return m_features; }
  int64_t out_features() const override { return m_features; }

  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  ActivationKind m_kind;
  int64_t m_features;
  Backend* m_backend = nullptr;
  RowViews m_y, m_dx;
  Tensor m_x;
  GradNumerics* m_numerics = nullptr;  // nn/numerics.h
  RowViews m_dx_f32;
  size_t m_site = 0;
};

class LayerNorm final : public Module {
 public:
  static constexpr float kEps = 1e-5f;  // PyTorch's default

  explicit LayerNorm(int64_t features);

  std::string describe() const override;  // "LayerNorm((256,), eps=1e-05, elementwise_affine=True)"
  int64_t in_features() const override { return m_features; }
  int64_t out_features() const override { return m_features; }

  void declare(FlatLayout& layout, const std::string& prefix) override;
  void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const override;
  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  int64_t m_features;
  size_t m_gamma_entry = 0, m_beta_entry = 0;
  Backend* m_backend = nullptr;
  ParamSlot m_gamma, m_beta;
  RowViews m_y, m_dx, m_mean, m_rstd;
  Tensor m_x;
  GradNumerics* m_numerics = nullptr;  // nn/numerics.h
  RowViews m_dx_f32;
  size_t m_site = 0;
};

class Dropout final : public Module {
 public:
  // p in [0, 1); rng is the model's shared counter and outlives the module.
  Dropout(float p, int64_t features, DropoutRng* rng);

  std::string describe() const override;  // "Dropout(p=0.1, inplace=False)"
  int64_t in_features() const override { return m_features; }
  int64_t out_features() const override { return m_features; }
  float p() const { return m_p; }

  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  float m_p;
  int64_t m_features;
  DropoutRng* m_rng;
  Backend* m_backend = nullptr;
  RowViews m_y, m_dx;
  bool m_applied = false;              // whether the last forward drew a mask (training and p > 0)
  uint64_t m_stream = 0;               // that mask's stream
  GradNumerics* m_numerics = nullptr;  // nn/numerics.h
  RowViews m_dx_f32;
  size_t m_site = 0;
};

class Sequential final : public Module {
 public:
  Sequential() = default;
  void append(std::unique_ptr<Module> module);
  size_t size() const { return m_modules.size(); }
  const Module& at(size_t i) const { return *m_modules.at(i); }

  std::string describe() const override;  // "Sequential(N modules)"
  int64_t in_features() const override;
  int64_t out_features() const override;

  // Child i is declared under prefix + "." + i.
  void declare(FlatLayout& layout, const std::string& prefix) override;
  void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const override;
  // Child 0 gets input_grad; every later child must produce its dx.
  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;
  void collect_buffers(std::vector<std::pair<std::string, Tensor>>& out) const override;

 private:
  std::vector<std::unique_ptr<Module>> m_modules;
  Tensor m_input;  // the last forward's input, rows folded
};

}  // namespace ampctl::nn
