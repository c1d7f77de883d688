// The losses, in fp32 on the (possibly low-precision) logits as autocast runs them, with mean
// reduction as PyTorch's defaults:
//   cross_entropy  targets are i32 class indices [batch]; also counts correct argmaxes;
//   mse            targets are f32 [batch, outputs].
// When a grad_scale (f32[1], the GradScaler's scale: the scaled loss's backward seed) is given,
// the loss also writes dlogits = d(loss)/d(logits) * grad_scale, rounded once to the logits'
// dtype: the gradient that enters the model's backward pass.
#pragma once

#include "ampctl/nn/loss_kind.h"
#include "ampctl/nn/module.h"

namespace ampctl::nn {

// LossKind (its names: nn/loss_kind.h).

class Loss {
 public:
  Loss(LossKind type, int64_t outputs);

  LossKind type() const { return m_type; }
  // Allocates dlogits for max_batch rows of dtype act. numerics (nn/numerics.h), when given:
  // on its sampled steps dlogits is written in f32 and rounded through it (counted for the
  // layer that consumes it).
  void setup(Backend& backend, int64_t max_batch, DType act, GradNumerics* numerics = nullptr);
  // As setup, but dlogits is written over `logits` itself ([max_batch, outputs], the model's
  // logits buffer, which forward must then be given): no second vocabulary-wide buffer, as
  // llm.c's fused classifier. softmax_cross_entropy reads a row before writing its gradient
  // (backend.h), so the loss is the same; the logits are gone after a forward with a
  // grad_scale. cross_entropy only.
  void setup_in_place(Backend& backend, const Tensor& logits, GradNumerics* numerics = nullptr);

  // logits: [batch, outputs]. targets: i32 [>= batch] or f32 [>= batch, outputs] (the first
  // batch rows are used). loss_out: f32[1]. correct_out: i32[1] or undefined (cross_entropy
  // only). grad_scale: f32[1] or undefined (no gradient). Returns whether dlogits was written.
  bool forward(const Tensor& logits, const Tensor& targets, int64_t batch, const Tensor& loss_out,
               const Tensor& correct_out, const Tensor& grad_scale);
  // The gradient written by the last forward with a grad_scale: [batch, outputs].
  const Tensor& grad(int64_t batch) { return m_dlogits.rows(batch); }

 private:
  LossKind m_type;
  int64_t m_outputs;
  Backend* m_backend = nullptr;
  RowViews m_dlogits;
  LeadingRows m_targets;
  Tensor m_undefined;
  GradNumerics* m_numerics = nullptr;
  size_t m_site = 0;
  RowViews m_dlogits_f32;  // the f32 dlogits of sampled steps
};

}  // namespace ampctl::nn
