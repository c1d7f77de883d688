// What each model type estimates beside its class (its static estimate, read through
// nn::estimate_model_memory, nn/models.h): the memory its arenas and activation buffers take,
// estimated from ModelOptions before anything is allocated (train/memory_plan.h adds the
// gradients, the optimizer state and the data, and refuses a run that cannot fit).
//
// Invariant: every product is overflow-checked; a size past 64 bits throws Error{config} naming
// the config key that makes it large ("model.hidden[1]", "model.n_embd", "model.conv[0]").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampctl {
class Backend;
}  // namespace ampctl

namespace ampctl::nn {

struct ModelOptions;

struct ModelMemory {
  int64_t parameters = 0;        // elements of the parameter arena, each tensor aligned
  int64_t activation_bytes = 0;  // the activation buffers for options.max_batch rows
  std::string parameter_key;     // names an overflow of the parameter bytes ("... (bytes)")
  std::string model_key;         // the key to make smaller when the model's part is the largest
  std::string activation_key;    // ... when the activations are
  // The parameter tensors' names in the model's layout order (what Model::layout() lists once
  // built), so that a configuration's debug.inject_tensor is checked before anything is built.
  std::vector<std::string> parameter_names;
};

// The elements of one parameter tensor as the arena lays it out (16-element boundaries,
// FlatLayout::kAlignElements); `key` names an overflow.
int64_t arena_aligned(int64_t n, const std::string& key);

// A model counted per row (the MLP; the CNN's head): the Linear stack in -> hidden... -> out,
// each hidden layer with its LayerNorm when layer_norm. `activations` holds the widths each
// layer outputs (elements per row); keys name the hidden width that makes a layer large
// (model.hidden[i]).
struct DenseCount {
  int64_t parameters = 0;
  int64_t activations = 0;
  std::string last_key;  // the last layer's key
};
DenseCount dense_stack_count(int64_t in, const std::vector<int64_t>& hidden, int64_t out,
                             bool layer_norm);

// Bytes per activation element of one row: the fp32 output and its gradient, the low-precision
// copy the next matmul reads, and the pre-activation kept for the backward pass (4 + 4 + 2 + 4,
// with room for a dropout mask or layer-norm statistics).
inline constexpr int64_t kActivationBytes = 16;

// The estimate of a model counted per row: the input's width joins the activations, which are
// kActivationBytes per element for `batch` rows (data.batch_size names an overflow); the
// activations are blamed on model.hidden or data.batch_size, whichever is the larger factor.
ModelMemory per_row_memory(const DenseCount& count, int64_t in, int64_t out,
                           const std::vector<int64_t>& hidden, int64_t batch);

}  // namespace ampctl::nn
