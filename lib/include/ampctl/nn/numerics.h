// GradNumerics: the counting hook the layers call on sampled steps (logging.numerics_every;
// docs/reference.md "Gradient numerics", docs/design.md "Gradient numerics").
//
// On a sampled step every layer that rounds a gradient to f16/bf16 writes it in f32 first (into
// a workspace it allocated at setup through workspace()) and rounds it with round(), which calls
// Backend::round_counted: the op writing an f32 output computes the same float it would round
// directly (backend.h: one rounding per output), so the lowp bits, and the whole training run,
// are unchanged; only the counters learn what the rounding did. On other steps active() is false
// and the layers take their ordinary path: an unsampled step costs nothing.
//
// Attribution. A rounding is counted for one parameter tensor (a layout entry):
//   * a layer's own gradient products (Linear's dW and db) count for that tensor: round(entry);
//   * an activation gradient (the loss's dlogits, an activation's or dropout's dx, a Linear's
//     dx, LayerNorm's dx) counts for the parameter tensor whose layer consumes it next in the
//     backward: the producer rounds it into its own site (add_site() at setup, round_site()), the
//     consumer claims every site rounded since the last claim (claim(entry), host bookkeeping
//     only). A Linear claims for its weight, LayerNorm for its gamma. A site never claimed (the
//     gradient of a model's input) is not counted.
// A new layer type (GPT, CNN) follows the same two rules: round its own products with round(),
// its activation gradients with round_site(), and claim() for its main tensor before it uses dy.
//
// Counters: one row of numerics::kWidth int64s per layout entry and per site, in one device
// tensor allocated at setup (grown by add_site, never inside a step), zeroed by begin(), read back
// once by read() after the step (the only host sync, on sampled steps only).
// grad_amax (docs/reference.md "grad_amax"): every training step in fp16/bf16 runs the layers'
// f32 path, not only the sampled ones: begin(false) makes the step active without counting, and
// round()/round_site() then round with Backend::round_amax, which raises one f32[2] accumulator
// (amax(): the largest finite |x| before any rounding of the step's backward, and whether a
// non-finite x reached one) in the same pass. On a sampled step (begin(true)) both ops run on
// the same src: the counters and the amax (the second rounding writes the same bits). The
// accumulator is zeroed by begin() and stays on the device: the step all-reduces it over the
// ranks (a max) and the monitor copies it into its metrics ring.
// A model whose every backward rounding goes through this hook says so (Model::
// roundings_instrumented); the others report no grad_amax and no numerics lines.
// Invariants: in fp32 nothing rounds and no GradNumerics exists (Model::numerics() is null).
#pragma once

#include <cstdint>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/tensor.h"

namespace ampctl::nn {

class GradNumerics {
 public:
  // entries: the model's parameter tensors (rows 0 .. entries - 1); lowp: the activation dtype.
  GradNumerics(Backend& backend, size_t entries, DType lowp);
  GradNumerics(const GradNumerics&) = delete;
  GradNumerics& operator=(const GradNumerics&) = delete;

  DType lowp() const { return m_lowp; }
  size_t entries() const { return m_entries; }

  // ---- at setup ----
  // A rounding site for activation gradients; returns its id for round_site.
  size_t add_site();
  // An f32 workspace of `shape` (zeros), for the f32 outputs of sampled steps.
  Tensor workspace(const Shape& shape);

  // ---- around a training step ----
  // amax := 0, active; and when `count` (a sampled step) counters := 0 and the roundings count.
  void begin(bool count);
  void end();  // inactive
  bool active() const { return m_active; }
  bool counting() const { return m_counting; }
  // f32 [numerics::kAmaxWords]: the step's grad_amax accumulator (math/numerics_math.h).
  const Tensor& amax() const { return m_amax; }

  // ---- inside an active step (device ops only) ----
  // dst := round(src), into the amax, and when counting counted for layout entry `entry`.
  void round(const Tensor& src, const Tensor& dst, size_t entry);
  // dst := round(src), counted in `site` until a consumer claims it.
  void round_site(const Tensor& src, const Tensor& dst, size_t site);
  // dst := round(op(a) op(b)) (a product the layer would write in lowp), for `entry` or into
  // `site` as round() / round_site(): on a sampled step written into f32 (a workspace of at
  // least dst's numel) and rounded there; on the others Backend::gemm_round_amax, which the CPU
  // fuses (the max in the product's epilogue: no f32 product written and read again).
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& f32,
            const Tensor& dst, size_t entry);
  void gemm_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& f32,
                 const Tensor& dst, size_t site);
  // The same for gemm_batched (Backend::gemm_batched_round_amax) and for an activation's
  // backward (Backend::activation_backward_amax), into `site`.
  void gemm_batched_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                         const Tensor& f32, const Tensor& dst, size_t site);
  void activation_backward_site(ActivationKind kind, const Tensor& x, const Tensor& y,
                                const Tensor& dy, const Tensor& f32, const Tensor& dx, size_t site);
  // causal_softmax_backward with round_scaled (scale: f32[1]) and its two roundings, g into
  // g_site, then round(g) * scale into dscores_site (Backend::causal_softmax_backward_amax).
  void causal_softmax_backward_sites(const Tensor& probs, const Tensor& dprobs, const Tensor& scale,
                                     const Tensor& f32, const Tensor& dscores, size_t g_site,
                                     size_t dscores_site);
  // The sites rounded since the last claim now count for `entry`.
  void claim(size_t entry);

  // ---- after the step ----
  // Per layout entry, its kWidth counters with the claimed sites added (max_bits: the max), in
  // `out` (resized to entries * kWidth). One download.
  void read(std::vector<int64_t>& out);

 private:
  const Tensor& row(size_t r) const { return m_rows[r]; }
  void allocate();  // the counters for the entries and the sites so far

  Backend* m_backend;
  size_t m_entries;
  DType m_lowp;
  bool m_active = false;
  bool m_counting = false;
  Tensor m_amax;                  // f32 [kAmaxWords]
  Tensor m_counters;              // i32 [entries + sites, kWords]
  std::vector<Tensor> m_rows;     // a view per row
  std::vector<size_t> m_owner;    // per site: the entry that claimed it (or kNone)
  std::vector<size_t> m_pending;  // sites rounded since the last claim (capacity: sites)
  std::vector<int64_t> m_host;    // the downloaded counters
};

}  // namespace ampctl::nn
