// Launchers of kernels/nn_xent.cu: softmax cross-entropy with its gradient, one pass over the logits.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

struct XentPointers {
  const void* logits;  // [rows, cols] of logits_type
  ElemType logits_type;
  const int32_t* labels;  // [rows]; clamped into [0, cols) on the device
  float* loss;            // one element: the mean over rows of -log_softmax[label]
  int32_t* correct;       // one element or nullptr: rows whose first argmax is the label
  void* dlogits;          // [rows, cols] of dlogits_type, or nullptr; may be logits (in place)
  ElemType dlogits_type;
  const float* grad_scale;  // one element; read only when dlogits is set
};

// Floats of workspace launch_softmax_cross_entropy needs for `rows` rows.
size_t xent_workspace_floats(int64_t rows);

void launch_softmax_cross_entropy(const XentPointers& p, int64_t rows, int64_t cols,
                                  float* workspace, cudaStream_t stream);

}  // namespace ampctl::kernels
