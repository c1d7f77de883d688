// Backend: the small table of tensor ops everything above runs on. Two implementations: the CPU
// backend (the reference: plain code, OpenBLAS for matrix products) and the CUDA backend
// (cuBLAS + kernels/), checked against the CPU one op by op.
//
// Conventions for every op:
//   * Tensors are contiguous and row-major; shapes and dtypes are checked by the op, which throws
//     Error{invalid_argument} naming both sides on a mismatch.
//   * Floating-point arithmetic happens in float32 (the "opmath" of PyTorch for f16/bf16) and the
//     result is rounded once, to nearest even, to the output's dtype.
//   * Scalars that the GPU must not read back (scale, inv_scale, found_inf, step counters) are
//     one-element device tensors, never host values, so a GPU step needs no host sync.
//   * Ops are asynchronous on the GPU (one stream, in issue order); download() and synchronize()
//     are the only points that wait.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ampctl/amp/amp_math.h"
#include "ampctl/core/tensor.h"
#include "ampctl/optim/sgd_math.h"

namespace ampctl {

// Arguments of the fused SGD update over one flat parameter buffer.
struct SgdStepArgs {
  Tensor params;        // f32, updated in place
  Tensor grads;         // f32, same numel; read only
  Tensor momentum_buf;  // f32, same numel; undefined when momentum == 0
  Tensor step;          // i32[1]: real (unskipped) steps so far; 0 means "initialise momentum"
  Tensor found_inf;     // f32[1] or undefined: when non-zero the whole update is skipped
  Tensor inv_scale;     // f32[1] or undefined: gradients are multiplied by it first
  Tensor lowp_params;   // f16/bf16 copy of params written in the same pass, or undefined
  optim::SgdHyper hyper;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // A human-readable description: "cpu (OpenBLAS, 2 threads)", "cuda:0 (NVIDIA H200, sm_90)".
  virtual std::string description() const = 0;

  // ---- memory ----
  // Uninitialised storage on this backend's device (the CPU backend zero-fills).
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  Tensor zeros(const Shape& shape, DType dtype);
  // Host bytes -> tensor and tensor -> host bytes; byte counts must equal nbytes().
  virtual void upload(const Tensor& dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const Tensor& src) = 0;     // waits for pending work
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;  // same dtype and numel
  // Every element := value, rounded to float and then to dst's dtype as PyTorch's fill_ does
  // (i32: value must be integral).
  virtual void fill(const Tensor& dst, double value) = 0;
  virtual void synchronize() = 0;

  // Convenience: a host vector into a new tensor of this backend, and back.
  Tensor from_host(const Shape& shape, DType dtype, const void* data);
  Tensor to_host(const Tensor& t);  // a host tensor with the same contents
  float read_scalar_f32(const Tensor& t);
  int32_t read_scalar_i32(const Tensor& t);

  // ---- casts and elementwise ----
  // dst := src converted (float dtypes, or i32 <-> f32), one rounding. Equal numel.
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;
  // out := round_out(float(x) * scale[0]); scale is f32[1]. out may alias x.
  virtual void mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) = 0;
  // dst := round_dst(float(dst) + alpha * float(src)). Equal numel, any float dtypes.
  virtual void add_(const Tensor& dst, const Tensor& src, float alpha = 1.0f) = 0;

  // C := alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X or X^T.
  // A and B: f32, f16 or bf16 (may differ); products accumulate in float32; C is f32, f16 or
  // bf16 and is rounded once (when beta != 0, C is read, widened, added in float32 and rounded).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f) = 0;

  // out[0] := sqrt(sum of squares of every element of every tensor), accumulated in double in a
  // fixed order (deterministic), rounded once to float. out is f32[1].
  virtual void global_norm(std::span<const Tensor> tensors, const Tensor& out) = 0;

  // ---- the amp ops (SPEC section 3) ----
  // For every element of every tensor: found_inf[0] := 1 if it is inf or NaN (never cleared);
  // the element := round(float(x) * inv_scale[0]), untouched when inv_scale[0] == 1.
  virtual void non_finite_check_and_unscale_(std::span<const Tensor> tensors,
                                             const Tensor& found_inf, const Tensor& inv_scale) = 0;
  // inv[0] := float32(1 / double(scale[0])).
  virtual void inv_scale(const Tensor& scale, const Tensor& inv) = 0;
  // One update of scale (f32[1]), growth_tracker (i32[1]) and hysteresis_tracker (i32[1]) from
  // found_inf (f32[1]), by amp::update_scale_state.
  virtual void update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& hysteresis_tracker, const Tensor& found_inf,
                             const amp::ScaleUpdateParams& params) = 0;

  // ---- optimizers ----
  // One fused SGD step over a flat buffer (optim/sgd_math.h); when found_inf is given and
  // non-zero, nothing is written (params, buffer, step and lowp copy stay bitwise unchanged).
  virtual void sgd_step(const SgdStepArgs& args) = 0;
};

// The CPU backend. threads <= 0 means one per core.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// The CUDA backend on device `index`. Throws Error{cuda} with a hint when CUDA was not compiled
// in or no such usable GPU exists.
std::unique_ptr<Backend> make_cuda_backend(int index = 0);

// Whether this build includes the CUDA backend, the architectures it was built for ("90"), and
// how many usable GPUs there are (0 when none or not compiled in; never throws).
bool cuda_compiled();
std::string cuda_architectures();
int cuda_device_count();

}  // namespace ampctl
