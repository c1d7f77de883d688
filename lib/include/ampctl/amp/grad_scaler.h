// GradScaler: dynamic loss scaling with the API and semantics of torch.amp.GradScaler
// (docs/reference.md, "Scaler"), plus Megatron-style hysteresis and min/max bounds, and the
// scale rules of DeepSpeed, Megatron-LM and fairseq (`policy`, docs/reference.md "Scale rules").
//
// State lives in backend tensors: scale (f32[1]), growth tracker (i32[1]), hysteresis tracker
// (i32[1]), the rule's counters (i32[amp::kTrackerCount]) and one found_inf (f32[1]) per
// optimizer. scale/unscale_/update never read them on
// the host, so a GPU step has no device-to-host sync; step() reads found_inf only for an
// optimizer without the fused amp path (as PyTorch's found_inf.item()). Like PyTorch, the
// tensors are created lazily by the first scale() call, and get_scale() before it returns the
// initial scale.
//
// Per-optimizer state machine (PyTorch's OptState): READY -> unscale_ -> UNSCALED -> step ->
// STEPPED; update() returns every optimizer to READY. Misuse raises PyTorch's messages as
// Error{state}.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/optim/optimizer.h"

namespace ampctl::amp {

struct GradScalerOptions {
  // The device type the scaler's state lives on ("cpu" or "cuda"); empty = the backend's.
  // Naming a device other than the backend's is an error.
  std::string device;
  double init_scale = 65536.0;
  bool enabled = true;
  // The update rule and its settings (math/scale_rules.h; a run's: config::scale_settings). The
  // defaults reproduce PyTorch exactly. auto (docs/reference.md, "Scale rules") takes its
  // measurement from set_amax_input.
  ScaleUpdateParams rule;
};

enum class OptState { ready, unscaled, stepped };

// What step() did. `skipped`: found_inf was read on the host and the optimizer was not called
// (PyTorch returns None). `stepped`: it ran. `on_device`: a fused optimizer took found_inf and
// decides on the device; read found_inf (or the next metrics) to learn which.
enum class StepStatus { stepped, skipped, on_device };
const char* to_string(StepStatus status);

class GradScaler {
 public:
  // Validates the options (growth_factor > 1, backoff_factor < 1: PyTorch's messages; ours:
  // init_scale finite and > 0, growth_interval >= 1, hysteresis >= 1, 0 <= min_scale <=
  // max_scale). Throws Error{invalid_argument}.
  explicit GradScaler(Backend& backend, GradScalerOptions options = {});

  // outputs * scale, in outputs' dtype (float32 product rounded once). Identity when disabled.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  // Unscales the optimizer's gradients in place and records found_inf for it.
  void unscale_(optim::Optimizer& optimizer);

  // Unscales if not done yet, then steps the optimizer unless an inf/NaN was found.
  StepStatus step(optim::Optimizer& optimizer);

  // Updates the scale from every optimizer's found_inf (or sets it), then resets all optimizers
  // to READY.
  void update();
  void update(double new_scale);
  void update(const Tensor& new_scale);  // a one-element f32 tensor on this backend's device

  double get_scale() const;  // 1.0 when disabled; reads the device
  int64_t get_growth_tracker() const;
  int32_t get_hysteresis_tracker() const;
  double get_growth_factor() const { return m_rule.growth_factor; }
  void set_growth_factor(double f) { m_rule.growth_factor = f; }
  double get_backoff_factor() const { return m_rule.backoff_factor; }
  void set_backoff_factor(double f) { m_rule.backoff_factor = f; }
  int64_t get_growth_interval() const { return m_growth_interval; }
  void set_growth_interval(int64_t n) { m_growth_interval = n; }
  bool is_enabled() const { return m_enabled; }

  // PyTorch's five keys ("scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker") with its types, plus the rule's state under its framework's names
  // (checkpoint/scaler_state.h: "_hysteresis_tracker" for pytorch); {} when disabled.
  nlohmann::json state_dict() const;
  // No-op when disabled. Throws Error{input} on {} (PyTorch's message) or anything
  // checkpoint::parse_scaler_state refuses, or a hysteresis counter above `hysteresis`. Takes
  // the scale, the factors and the interval from `state` (PyTorch's behaviour). The rule's
  // counters are loaded when `state` was written under this scaler's policy; under another they
  // start as a new scaler's (docs/reference.md, "Scale rules").
  void load_state_dict(const nlohmann::json& state);
  // As load_state_dict, but keeps this scaler's growth_factor, backoff_factor and
  // growth_interval (its options): what `ampctl resume --set scaler.*` continues with.
  void load_progress(const nlohmann::json& state);
  ScalePolicy policy() const { return m_rule.policy; }

  // The device-side state, for fused consumers and metrics (undefined before the first scale()).
  const Tensor& scale_tensor() const { return m_scale; }
  const Tensor& growth_tracker_tensor() const { return m_growth_tracker; }
  const Tensor& hysteresis_tracker_tensor() const { return m_hysteresis_tracker; }
  const Tensor& trackers_tensor() const { return m_trackers; }  // i32[amp::kTrackerCount]
  // found_inf of the last update(), summed over optimizers (f32[1]; non-zero = overflow).
  const Tensor& found_inf_tensor() const { return m_found_inf_combined; }
  OptState stage(const optim::Optimizer& optimizer) const;

  // Creates the device state now instead of at the first scale() (PyTorch's lazy creation), so
  // a training loop can allocate everything before its first step. No-op when disabled or
  // already created.
  void init_state();
  // out := x * scale, as scale(x) but into a caller-owned tensor of x's shape and dtype (no
  // allocation: a backward seed computed inside a step); out := x when disabled. Throws
  // Error{state} before the state exists (init_state or a first scale()).
  void scale_into(const Tensor& x, const Tensor& out) const;

  // What a metrics line reports, copied on the device into caller-owned one-element views (no
  // host sync): record_scale writes the current scale (f32; 1 when disabled; call it before
  // update() for the scale this iteration's backward used); record_update writes, after
  // update(), found_inf (f32; 0 when disabled), the growth and hysteresis trackers (i32; 0 when
  // disabled) and, when `segments` is defined and set_grad_segments was called for `optimizer`,
  // its per-segment overflow flags (i32 [S]).
  void record_scale(const Tensor& scale_out) const;
  void record_update(const optim::Optimizer& optimizer, const Tensor& found_inf_out,
                     const Tensor& growth_out, const Tensor& hysteresis_out,
                     const Tensor& segments_out) const;

  // Overflow attribution (an extension; PyTorch has none): cuts the optimizer's gradients (the
  // elements of its grads(), numbered consecutively) into segments starting at `starts` (0 first,
  // strictly increasing, each below 2^31 and at most the element count), e.g. one segment per
  // parameter tensor of a flat gradient arena. Every later check of its gradients (unscale_, or
  // step's check) then also records, in the same pass, which segments held an inf or NaN.
  // Allocates: call before the first step. No-op when disabled. Throws Error{invalid_argument}.
  void set_grad_segments(optim::Optimizer& optimizer, const std::vector<int64_t>& starts);
  // i32 [S] on the device: 1 for each segment that held an inf or NaN at the last check of the
  // optimizer's gradients (each check zeroes it first); undefined without set_grad_segments.
  const Tensor& segment_found_tensor(const optim::Optimizer& optimizer) const;

  // The global norm of the unscaled gradients, from the check pass itself (an extension):
  // after this, every check of an optimizer's gradients (unscale_, or step's check-only pass)
  // also writes into `norm` (f32[1] on this backend's device, caller-owned) the norm of the
  // values the optimizer will use, unscaled by 1/scale (Backend::non_finite_check_unscale_norm_:
  // global_norm's bits, no second read). Of the gradients this rank checks: with a found_inf
  // hook (sharded gradients) that is its shard. An undefined tensor turns it off. No-op when
  // disabled (there is no check pass; take global_norm of the gradients).
  void set_norm_output(const Tensor& norm) { m_norm_out = norm; }

  // Profiling: `hook` runs inside step() after the inf check and before the optimizer update,
  // so a caller timing a step by phase can split "unscale/check" from "optimizer". Set once (it
  // is a std::function: setting it allocates, calling it does not); empty by default.
  void set_phase_hook(std::function<void()> hook) { m_phase_hook = std::move(hook); }

  // Data parallel with sharded gradients (distributed.zero: 1, docs/distributed.md): `hook`
  // runs right after every check of an optimizer's gradients, with that check's found_inf
  // (f32[1] on the device), before anything reads it (the optimizer's update, update()). Each
  // rank then checks only its shard of the gradients, and the hook takes the max of found_inf
  // over the ranks, so every rank skips the same steps and moves the scale alike. Set once
  // (like set_phase_hook); empty by default.
  void set_found_inf_hook(std::function<void(const Tensor&)> hook) {
    m_found_inf_hook = std::move(hook);
  }

  // policy auto: the step's grad_amax accumulator (f32[numerics::kAmaxWords] on this backend's
  // device, nn/numerics.h: the max finite |x| at the step's scale before any rounding of the
  // backward, every rank's max), read by every update(). update() under auto without it throws
  // Error{state}.
  void set_amax_input(const Tensor& amax) { m_amax_in = amax; }
  // auto: the ring of measurements per unit of scale (f32[amax_history]; undefined before the
  // state exists or under another rule).
  const Tensor& amax_history_tensor() const { return m_history; }

 private:
  struct PerOptimizer {
    OptState stage = OptState::ready;
    bool recorded = false;  // found_inf holds this iteration's check
    Tensor found_inf;       // f32[1], allocated once per optimizer
    Tensor segment_starts;  // i32 [S] or undefined (set_grad_segments)
    Tensor segment_found;   // i32 [S] or undefined
  };

  void lazy_init();
  void check_initialized(const char* funcname) const;
  PerOptimizer& state_of(optim::Optimizer& optimizer);
  // Check (and unscale unless check_only) the optimizer's gradients into its found_inf.
  void unscale_grads(optim::Optimizer& optimizer, PerOptimizer& st, bool check_only);
  amp::ScaleUpdateParams update_params() const;
  void load_state(const nlohmann::json& state, bool take_settings);
  void write_trackers();  // m_init_trackers -> m_trackers

  Backend* m_backend;
  bool m_enabled;
  double m_init_scale;
  // The rule's settings; update() sends them with m_growth_interval, which set_growth_interval
  // may take out of int32's range (PyTorch's API: refused at the next update()).
  ScaleUpdateParams m_rule;
  int64_t m_growth_interval;
  int64_t m_init_growth_tracker = 0;
  int32_t m_init_hysteresis_tracker;
  std::array<int32_t, kTrackerCount> m_init_trackers;
  std::vector<float> m_init_history;  // auto: the ring's initial values (zeros, or a checkpoint's)

  Tensor m_scale;               // f32[1]
  Tensor m_growth_tracker;      // i32[1]
  Tensor m_hysteresis_tracker;  // i32[1]
  Tensor m_trackers;            // i32[kTrackerCount]: amp::ScaleTracker
  Tensor m_inv_scale;           // f32[1], recomputed from m_scale on each unscale
  Tensor m_ones;                // f32[1] = 1: the "check only" inv_scale
  Tensor m_found_inf_combined;  // f32[1]
  std::map<const optim::Optimizer*, PerOptimizer> m_per_optimizer;
  std::function<void()> m_phase_hook;
  std::function<void(const Tensor&)> m_found_inf_hook;
  Tensor m_norm_out;  // f32[1] or undefined: set_norm_output
  Tensor m_amax_in;   // f32[kAmaxWords] or undefined: set_amax_input
  Tensor m_history;   // auto: f32[amax_history]
};

}  // namespace ampctl::amp
