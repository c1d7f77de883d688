#include "ampctl/nn/memory_estimate.h"

#include <algorithm>

#include "ampctl/core/checked.h"
#include "ampctl/core/error.h"
#include "ampctl/core/tensor.h"

namespace ampctl::nn {

namespace {
constexpr ErrorKind kKind = ErrorKind::config;
constexpr int64_t kAlign = static_cast<int64_t>(FlatLayout::kAlignElements);
}  // namespace

int64_t arena_aligned(int64_t n, const std::string& key) {
  return checked_add(n, kAlign - 1, key, kKind) / kAlign * kAlign;
}

DenseCount dense_stack_count(int64_t in, const std::vector<int64_t>& hidden, int64_t out,
                             bool layer_norm) {
  std::vector<int64_t> widths{std::max<int64_t>(in, 1)};
  widths.insert(widths.end(), hidden.begin(), hidden.end());
  widths.push_back(std::max<int64_t>(out, 1));
  const auto key_of = [&](size_t layer) {
    // Layer i maps widths[i] -> widths[i + 1]: name the hidden width that makes it large (the
    // last layer's input is the last hidden width).
    if (hidden.empty()) return std::string("model.hidden");
    return "model.hidden[" + std::to_string(std::min(layer, hidden.size() - 1)) + "]";
  };
  DenseCount c;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const std::string key = key_of(i);
    const int64_t weights = checked_mul(widths[i], widths[i + 1], key + " (weights)", kKind);
    c.parameters =
        checked_add(c.parameters, arena_aligned(weights, key), key + " (parameters)", kKind);
    c.parameters =
        checked_add(c.parameters, arena_aligned(widths[i + 1], key), key + " (parameters)", kKind);
    if (layer_norm && i + 2 < widths.size()) {
      c.parameters = checked_add(
          c.parameters, checked_mul(arena_aligned(widths[i + 1], key), int64_t{2}, key, kKind),
          key + " (parameters)", kKind);
    }
    c.activations = checked_add(c.activations, widths[i + 1], key, kKind);
  }
  c.last_key = key_of(widths.size() - 2);
  return c;
}

ModelMemory per_row_memory(const DenseCount& count, int64_t in, int64_t out,
                           const std::vector<int64_t>& hidden, int64_t batch) {
  const std::string bkey = "data.batch_size";
  ModelMemory m;
  m.parameters = count.parameters;
  m.parameter_key = count.last_key + " (bytes)";
  const int64_t act = checked_add(count.activations, std::max<int64_t>(in, 1), bkey, kKind);
  m.activation_bytes =
      checked_mul(checked_mul(act, batch, bkey, kKind), kActivationBytes, bkey, kKind);
  // Activations grow with the batch times the widths: blame whichever factor is the larger.
  int64_t widths = std::max<int64_t>(in, 1) + std::max<int64_t>(out, 1);
  for (const int64_t h : hidden) widths += h;
  m.model_key = "model.hidden";
  m.activation_key = widths > batch ? "model.hidden" : "data.batch_size";
  return m;
}

}  // namespace ampctl::nn
