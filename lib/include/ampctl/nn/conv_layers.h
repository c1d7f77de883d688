// The layers of a convolutional network, each with PyTorch's parameter and buffer names,
// shapes, initialisation and semantics, and autocast's precision (docs/reference.md,
// "Precision"):
//
//   Conv2d       y = conv(x, W) + b: lowp operands (the f16/bf16 weight and bias copies, the
//                input already in lowp), fp32 accumulation, lowp output (autocast's conv2d).
//                Backward: dW (summed over the batch in fp32) and db are rounded to lowp once
//                and then added to the f32 gradients, as for Linear; dX in lowp.
//   MaxPool2d    exact in any dtype; ties go to the first maximum (PyTorch).
//   AvgPool2d    fixed windows (count_include_pad) or adaptive (AdaptiveAvgPool2d); float sums,
//                one rounding; lowp in and out (autocast leaves pooling alone).
//   BatchNorm2d  on neither of autocast's lists: it runs in its input's dtype (lowp after a
//                lowp conv) with the f32 master weight/bias and f32 statistics, as cuDNN's
//                batch norm takes fp16 data with fp32 parameters; the output is in the input's
//                dtype. Training: batch statistics (biased variance normalises), running_mean
//                and running_var updated with momentum 0.1 (unbiased variance) and
//                num_batches_tracked += 1; eval: the running statistics. dgamma/dbeta go in f32
//                straight into the f32 gradients. eps = 1e-5.
//   Flatten      [B, C, H, W] -> [B, C*H*W] (a view).
//
// Shapes: a Module works on rows of in_features() values; these layers know their image shape
// [C, H, W] (a construction parameter) and view each row as it, so an input may come as
// [B, C, H, W] or as [B, C*H*W] rows (what Activation and Dropout return). Their outputs are
// [B, C', H', W'] images.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/nn/module.h"

namespace ampctl::nn {

// An image shape [channels, height, width], every dimension >= 1.
struct ImageShape {
  int64_t c = 0, h = 0, w = 0;
  int64_t numel() const { return c * h * w; }
};

class Conv2d final : public Module {
 public:
  // Square kernel, stride and zero padding, as nn.Conv2d(in, out, kernel, stride, padding,
  // bias=bias); `in` is the input image shape. Throws Error{invalid_argument} when the output
  // would be empty.
  Conv2d(ImageShape in, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
         bool bias);

  // "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))" (", bias=False" without).
  std::string describe() const override;
  int64_t in_features() const override { return m_in.numel(); }
  int64_t out_features() const override { return m_out.numel(); }
  const ImageShape& out_shape() const { return m_out; }

  void declare(FlatLayout& layout, const std::string& prefix) override;
  // PyTorch's reset_parameters: weight ~ U(-b, b) (kaiming_uniform_ with a = sqrt(5)) and bias ~
  // U(-b, b), b = 1 / sqrt(fan_in), fan_in = in_channels * kernel^2; each tensor from its own
  // Philox stream init_stream(entry), as Linear.
  void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const override;
  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  ImageShape m_in, m_out;
  int64_t m_kernel;
  Conv2dGeometry m_geometry;
  bool m_has_bias;
  size_t m_weight_entry = 0, m_bias_entry = 0;
  Backend* m_backend = nullptr;
  ParamSlot m_weight, m_bias;
  RowViews m_y, m_dx;
  Tensor m_x;               // the last forward's input as [batch, C, H, W]
  Tensor m_dy;              // backward's dy as [batch, O, OH, OW]
  Tensor m_col, m_dcol;     // im2col of one image (act), its f32 gradient
  Tensor m_acc;             // f32 [O, C*k*k]: dW summed over the batch before its one rounding
  Tensor m_dw_ws, m_db_ws;  // act: dW and db rounded before they are added
  Tensor m_undefined;
  // Gradient numerics (nn/numerics.h): the f32 outputs of counted steps, dx's site.
  GradNumerics* m_numerics = nullptr;
  Tensor m_dw_f32, m_db_f32;
  RowViews m_dx_f32;
  size_t m_dx_site = 0;
};

// MaxPool2d (fixed square windows) or AvgPool2d / AdaptiveAvgPool2d.
class Pool2d final : public Module {
 public:
  enum class Kind { max, avg, adaptive_avg };
  // max / avg: kernel, stride (PyTorch's default stride is the kernel) and padding; adaptive_avg:
  // `kernel` is the output size (square) and stride/padding are unused.
  Pool2d(Kind kind, ImageShape in, int64_t kernel, int64_t stride, int64_t padding = 0);

  // "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)",
  // "AvgPool2d(kernel_size=2, stride=2, padding=0)", "AdaptiveAvgPool2d(output_size=(1, 1))".
  std::string describe() const override;
  int64_t in_features() const override { return m_in.numel(); }
  int64_t out_features() const override { return m_out.numel(); }
  const ImageShape& out_shape() const { return m_out; }

  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  Kind m_kind;
  ImageShape m_in, m_out;
  int64_t m_kernel, m_stride, m_padding;
  Pool2dGeometry m_geometry;
  Backend* m_backend = nullptr;
  RowViews m_y, m_dx, m_indices;
  Tensor m_dy;
  Tensor m_undefined;
  GradNumerics* m_numerics = nullptr;  // nn/numerics.h: dx in f32 on counted steps
  RowViews m_dx_f32;
  size_t m_site = 0;
};

class BatchNorm2d final : public Module {
 public:
  static constexpr float kEps = 1e-5f;  // PyTorch's defaults
  static constexpr float kMomentum = 0.1f;

  explicit BatchNorm2d(ImageShape in);

  // "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"
  std::string describe() const override;
  int64_t in_features() const override { return m_in.numel(); }
  int64_t out_features() const override { return m_in.numel(); }

  // weight and bias; the buffers are named from the same prefix.
  void declare(FlatLayout& layout, const std::string& prefix) override;
  void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const override;
  // Also allocates the buffers: running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  // Training-mode gradients; Error{state} after an eval-mode forward.
  const Tensor& backward(const Tensor& dy, int64_t batch) override;
  // prefix.running_mean f32 [C], prefix.running_var f32 [C], prefix.num_batches_tracked i32 []
  // (PyTorch's is int64 []: load_state_dict copies it across dtypes).
  void collect_buffers(std::vector<std::pair<std::string, Tensor>>& out) const override;

 private:
  ImageShape m_in;
  std::string m_prefix;
  size_t m_gamma_entry = 0, m_beta_entry = 0;
  Backend* m_backend = nullptr;
  ParamSlot m_gamma, m_beta;
  RowViews m_y, m_dx;
  Tensor m_x, m_dy;
  Tensor m_save_mean, m_save_invstd;  // f32 [C]
  Tensor m_running_mean, m_running_var, m_num_batches_tracked;
  Tensor m_undefined;
  GradNumerics* m_numerics = nullptr;  // nn/numerics.h: dx in f32 on counted steps
  RowViews m_dx_f32;
  size_t m_site = 0;
  bool m_trained = false;  // the last forward was in training mode
};

class Flatten final : public Module {
 public:
  explicit Flatten(ImageShape in);

  std::string describe() const override { return "Flatten(start_dim=1, end_dim=-1)"; }
  int64_t in_features() const override { return m_in.numel(); }
  int64_t out_features() const override { return m_in.numel(); }

  void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
             int64_t max_batch, DType act, bool input_grad) override;
  const Tensor& forward(const Tensor& x, int64_t batch, bool training) override;
  const Tensor& backward(const Tensor& dy, int64_t batch) override;

 private:
  ImageShape m_in;
  Tensor m_y, m_dx;  // views of the caller's tensors
};

// The first `batch` rows of x (>= batch * in.numel() elements) viewed as [batch, C, H, W] into
// `out` (reusing its Shape: no allocation). Throws Error{invalid_argument} naming `what` when x
// is too small.
void view_images(const Tensor& x, int64_t batch, const ImageShape& in, Tensor& out,
                 const char* what);

}  // namespace ampctl::nn
