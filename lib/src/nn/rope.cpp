// RoPE tables (nn/rope.h), Hugging Face's modeling_rope_utils step for step in float32.
#include "ampctl/nn/rope.h"

#include <cmath>
#include <string>

#include "ampctl/core/error.h"

namespace ampctl::nn {

namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error{ErrorKind::invalid_argument, "rope: " + what};
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim < 2 || head_dim % 2 != 0) {
    bad("head_dim must be even and >= 2, got " + std::to_string(head_dim));
  }
  if (!(theta > 0.0)) bad("rope_theta must be positive, got " + std::to_string(theta));
  const auto half = static_cast<size_t>(head_dim / 2);
  std::vector<float> inv(half);
  // _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), each
  // op on float32 tensors.
  const auto base = static_cast<float>(theta);
  const auto dim = static_cast<float>(head_dim);
  for (size_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    inv[i] = 1.0f / std::pow(base, exponent);
  }
  if (!scaling.enabled) return inv;
  if (!(scaling.factor > 0.0) || scaling.original_max_position_embeddings <= 0 ||
      !(scaling.high_freq_factor > scaling.low_freq_factor)) {
    bad("rope_scaling (llama3) needs factor > 0, original_max_position_embeddings > 0 and "
        "high_freq_factor > low_freq_factor");
  }
  // _compute_llama3_parameters. The Python scalars (doubles) meet float32 tensors as floats.
  const auto old_context = static_cast<double>(scaling.original_max_position_embeddings);
  const auto low_wavelen = static_cast<float>(old_context / scaling.low_freq_factor);
  const auto high_wavelen = static_cast<float>(old_context / scaling.high_freq_factor);
  const auto factor = static_cast<float>(scaling.factor);
  const auto low = static_cast<float>(scaling.low_freq_factor);
  const auto span = static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * M_PI);
  const auto old_f = static_cast<float>(old_context);
  for (size_t i = 0; i < half; ++i) {
    // wavelen = 2 * math.pi / inv_freq: reciprocal, then times the scalar.
    const float wavelen = (1.0f / inv[i]) * two_pi;
    // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    const float llama = wavelen > low_wavelen ? inv[i] / factor : inv[i];
    // smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    const float smooth = ((1.0f / wavelen) * old_f - low) / span;
    // (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    inv[i] = medium ? smoothed : llama;
  }
  return inv;
}

RopeTables rope_tables(const std::vector<float>& inv_freq, int64_t max_positions) {
  if (max_positions < 0) bad("max_positions must be >= 0");
  const size_t half = inv_freq.size();
  RopeTables t;
  t.cos.resize(static_cast<size_t>(max_positions) * half);
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (size_t d = 0; d < half; ++d) {
      // inv_freq @ position_ids (k = 1): one float product; cos/sin of that float.
      const float angle = inv_freq[d] * static_cast<float>(p);
      const size_t i = static_cast<size_t>(p) * half + d;
      t.cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t.sin[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return t;
}

}  // namespace ampctl::nn
