// Module: a layer with a hand-written forward and backward (no autograd, as llm.c).
//
// Life cycle, driven by Model (or by a test):
//   1. declare(layout, prefix)   parameters are appended to one FlatLayout under PyTorch's
//                                state_dict names ("layers.0.weight");
//   2. init(host, layout, seed)  initial values are written into a host copy of the f32 arena;
//   3. setup(backend, ...)       views of the parameters in the three arenas are taken and every
//                                activation and workspace is allocated for max_batch rows;
//   4. forward / backward        any number of times, for batch <= max_batch rows, with no heap
//                                allocation after the first call for a given batch size.
//
// Shapes: a module sees rows. An input [..., features] is folded into [rows, features]
// (fold_rows) where the leading dimensions do not matter to a layer (all of layers.h work row
// by row), so `batch` counts rows: samples for an MLP, samples x positions for a sequence model.
// A layer that cares about the leading dimensions (attention over positions) takes them as
// construction parameters and views its rows accordingly. A layer that takes ids (an
// embedding) takes an i32 input instead of `act` and produces `act` rows.
//
// Composition: a module owns its children and calls them, as Sequential does, so a residual
// branch is a module whose forward returns x + f(x) from its own buffer and whose backward
// returns dy + f.backward(dy). A parameter used in two places (tied input and output
// embeddings) is declared once; the second user binds the same layout entry (bind) and its
// backward ADDS into the same gradient slot, as every backward here accumulates: the tied
// tensor's gradient is the sum over its uses, as autograd's.
//
// Precision (docs/reference.md, "Precision"): a module computes in one activation dtype `act`
// (f16/bf16 under autocast, f32 otherwise). Activations and activation gradients are `act` tensors;
// the f32 master parameters, their f32 gradients and the f16/bf16 weight copy live in the arenas
// (ParamArenas) that the optimizer updates in one pass.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/tensor.h"

namespace ampctl::nn {

class GradNumerics;  // nn/numerics.h

// Philox streams of the nn module, keyed by the run's seed. The upper 32 bits are an ASCII tag
// ("init", "drop") so they never meet each other or the data module's "data" streams.
inline constexpr uint64_t kInitStreamTag = 0x696e6974u;
inline constexpr uint64_t kDropoutStreamTag = 0x64726f70u;
// Initial values of the parameter tensor at index `entry` of the model's layout.
constexpr uint64_t init_stream(size_t entry) {
  return kInitStreamTag << 32 | static_cast<uint32_t>(entry);
}
// The mask of the `call`-th training-mode dropout application of a model (counted across every
// Dropout module and every forward, in execution order; the count is the model's RNG state).
constexpr uint64_t dropout_stream(uint64_t call) {
  return kDropoutStreamTag << 32 | static_cast<uint32_t>(call);
}

// The three buffers of one FlatLayout: f32 masters, f32 gradients, and the f16/bf16 copy of the
// masters that the matrix products read (undefined in fp32).
struct ParamArenas {
  Tensor params;
  Tensor grads;
  Tensor lowp;
  // The gradient-numerics hook (nn/numerics.h) when logging.numerics_every is on in fp16/bf16,
  // else null: layers that round gradients allocate its workspaces at setup and count through it.
  GradNumerics* numerics = nullptr;
};

// One parameter tensor as views into the arenas.
struct ParamSlot {
  size_t entry = 0;  // index in the layout
  Tensor param;      // f32 master
  Tensor grad;       // f32 gradient
  Tensor lowp;       // f16/bf16 copy, undefined in fp32
  // What autocast's matrix products read: the low-precision copy, or the master in fp32.
  const Tensor& compute() const { return lowp.defined() ? lowp : param; }
};

// Views of the leading rows of a buffer allocated for max rows, cached per row count. A view
// itself costs no allocation (its Shape is stored inline); the cache is what lets forward and
// backward return a reference that stays valid until the next call. Four slots cover a training
// batch, the last partial batch, and the same two for evaluation.
class RowViews {
 public:
  RowViews() = default;
  explicit RowViews(Tensor full);

  const Tensor& full() const { return m_full; }
  bool defined() const { return m_full.defined(); }
  // The first n rows (0 < n <= max rows), with the full tensor's trailing dimensions.
  const Tensor& rows(int64_t n);

 private:
  static constexpr size_t kSlots = 4;
  Tensor m_full;
  std::array<std::pair<int64_t, Tensor>, kSlots> m_slots{};
  size_t m_next = 0;
};

// The first n rows of a caller's tensor: the tensor itself when it has exactly n rows, otherwise
// a view, cached per row count for the last tensor asked about (as RowViews), so that a loop over
// one input buffer with a few batch sizes allocates nothing after the first call of each.
class LeadingRows {
 public:
  const Tensor& of(const Tensor& src, int64_t n);

 private:
  static constexpr size_t kSlots = 4;
  Tensor m_source;  // the tensor the cached views are of (held: its storage cannot be reused)
  std::array<std::pair<int64_t, Tensor>, kSlots> m_slots{};
  size_t m_next = 0;
};

// A dropout mask counter shared by the Dropout modules of one model.
struct DropoutRng {
  uint64_t seed = 0;
  uint64_t calls = 0;  // training-mode dropout applications so far
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // PyTorch's repr: "Linear(in_features=32, out_features=256, bias=True)".
  virtual std::string describe() const = 0;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;

  // Appends this module's parameters to `layout` as prefix + ".weight" etc.
  virtual void declare(FlatLayout& layout, const std::string& prefix);
  // Writes the initial values of its parameters into `host` (the f32 arena, on the host).
  virtual void init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const;
  // Takes its parameter views and allocates its buffers for up to max_batch rows of dtype
  // `act`. input_grad: whether backward must produce dx (false for a model's first layer).
  virtual void setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                     int64_t max_batch, DType act, bool input_grad) = 0;

  // x: [batch, in_features] of dtype act; returns the output [batch, out_features], a view
  // this module (or, for an identity, its input's owner) keeps alive until the next call.
  virtual const Tensor& forward(const Tensor& x, int64_t batch, bool training) = 0;
  // dy: [batch, out_features], the gradient of the last forward's output. Accumulates into the
  // parameter gradients and returns dx [batch, in_features] (undefined when setup had
  // input_grad = false).
  virtual const Tensor& backward(const Tensor& dy, int64_t batch) = 0;

  // Appends this module's buffers (tensors saved in checkpoints and exports but not optimised,
  // as BatchNorm's running statistics) as (state_dict name, tensor on the backend), in
  // PyTorch's order. Valid after setup.
  virtual void collect_buffers(std::vector<std::pair<std::string, Tensor>>& out) const;

  // Indices into the layout of this module's parameters (empty for parameter-free modules).
  const std::vector<size_t>& param_entries() const { return m_entries; }

 protected:
  // Declares one parameter and remembers its entry.
  size_t declare_param(FlatLayout& layout, const std::string& name, const Shape& shape);
  // The views of layout entry `entry` in the arenas.
  static ParamSlot bind(const FlatLayout& layout, const ParamArenas& arenas, size_t entry);

 private:
  std::vector<size_t> m_entries;
};

// x viewed as [rows, cols], rows = numel / cols: the leading dimensions of an [..., cols] tensor
// folded. A tensor of rank <= 2, or one whose last dimension is not cols, is returned as it is
// (check_matrix then names what is wrong). No allocation.
Tensor fold_rows(const Tensor& x, int64_t cols);

// Throws Error{invalid_argument} unless t is a [rows, cols] tensor of `dtype` with
// rows == batch (exact) or rows >= batch (!exact); `what` names the argument. Allocates only on
// the failure path, so it may run inside a step.
void check_matrix(const Tensor& t, int64_t batch, int64_t cols, DType dtype, bool exact,
                  const char* what);

}  // namespace ampctl::nn
