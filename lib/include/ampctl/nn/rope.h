// The tables of rotary position embeddings (Backend::rope_forward / rope_backward) as Hugging
// Face's LlamaRotaryEmbedding computes them: inverse frequencies from rope_theta (and, for
// rope_scaling of type llama3, _compute_llama3_parameters' smoothing), then cos and sin of
// position * inv_freq for every position below max_positions. Host code, run once when a model is
// built; the tables are then uploaded and shared by every layer.
//
// Precision: every step in float32 in Hugging Face's order of operations (PyTorch's f32 tensor
// arithmetic with Python scalars: `a / tensor` is tensor.reciprocal() * a, comparisons and
// products with a scalar take the scalar as a float), so the inverse frequencies are torch's bit
// for bit wherever powf and the reciprocal agree; cos and sin are the correctly rounded float of
// the float angle (computed in double), which torch's cos/sin kernels match to within an ulp.
#pragma once

#include <cstdint>
#include <vector>

namespace ampctl::nn {

// rope_scaling {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}; `enabled` false is HF's default RoPE.
struct RopeScaling {
  bool enabled = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// HF's inv_freq for head_dim (even, >= 2) and theta: 1 / theta^(2 i / head_dim), i < head_dim / 2,
// then the llama3 scaling when enabled. Throws Error{invalid_argument} for an odd or non-positive
// head_dim, theta <= 0 or a scaling whose high_freq_factor is not above low_freq_factor or whose
// factor or original_max_position_embeddings is not positive.
std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);

// cos and sin [max_positions, head_dim / 2] (row p, column d: position p times inv_freq[d]), the
// layout the backend's rope ops take.
struct RopeTables {
  std::vector<float> cos, sin;
};
RopeTables rope_tables(const std::vector<float>& inv_freq, int64_t max_positions);

}  // namespace ampctl::nn
