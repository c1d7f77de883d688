#include "ampctl/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ampctl/checkpoint/scaler_state.h"

namespace ampctl::amp {
namespace {

Error state_error(const std::string& message) {
  return Error{ErrorKind::state, message};
}

Error bad_option(const std::string& message) {
  return Error{ErrorKind::invalid_argument, message};
}

const char* device_type_name(DeviceType t) {
  return t == DeviceType::cpu ? "cpu" : "cuda";
}

}  // namespace

const char* to_string(StepStatus status) {
  switch (status) {
    case StepStatus::stepped:
      return "stepped";
    case StepStatus::skipped:
      return "skipped";
    case StepStatus::on_device:
      return "on_device";
  }
  return "?";
}

GradScaler::GradScaler(Backend& backend, GradScalerOptions o)
    : m_backend(&backend),
      m_enabled(o.enabled),
      m_init_scale(o.init_scale),
      m_rule(o.rule),
      m_growth_interval(o.rule.growth_interval),
      m_init_hysteresis_tracker(o.rule.hysteresis),
      m_init_trackers(kInitialTrackers) {
  const char* backend_type = device_type_name(backend.device().type);
  if (!o.device.empty() && o.device != backend_type) {
    throw bad_option("GradScaler device '" + o.device + "' does not match the backend's device '" +
                     backend_type + "'");
  }
  if (!m_enabled) return;
  const ScaleUpdateParams& r = o.rule;
  // PyTorch's own checks and messages first.
  if (!(r.growth_factor > 1.0)) throw bad_option("The growth factor must be > 1.0.");
  if (!(r.backoff_factor < 1.0)) throw bad_option("The backoff factor must be < 1.0.");
  if (!(r.backoff_factor > 0.0)) {
    throw bad_option("The backoff factor must be > 0.0, got " + std::to_string(r.backoff_factor));
  }
  if (!(std::isfinite(o.init_scale) && o.init_scale > 0.0)) {
    throw bad_option("The initial scale must be finite and > 0, got " +
                     std::to_string(o.init_scale));
  }
  if (r.growth_interval < 1) {
    throw bad_option("The growth interval must be an integer in [1, 2^31 - 1], got " +
                     std::to_string(r.growth_interval));
  }
  if (r.hysteresis < 1) {
    throw bad_option("The hysteresis must be >= 1, got " + std::to_string(r.hysteresis));
  }
  if (!(r.min_scale >= 0.0 && std::isfinite(r.min_scale))) {
    throw bad_option("min_scale must be finite and >= 0, got " + std::to_string(r.min_scale));
  }
  if (!(r.max_scale >= r.min_scale && r.max_scale > 0.0)) {
    throw bad_option("max_scale must be > 0 and >= min_scale, got " + std::to_string(r.max_scale));
  }
  if (static_cast<int32_t>(r.policy) < 0 || static_cast<size_t>(r.policy) >= kScaleRules.size()) {
    throw bad_option("unknown scale policy " + std::to_string(static_cast<int32_t>(r.policy)));
  }
  if (!(std::isfinite(r.tolerance) && r.tolerance >= 0.0)) {
    throw bad_option("tolerance must be finite and >= 0, got " + std::to_string(r.tolerance));
  }
  if (scale_rule(r.policy).keys.amax_history) {
    if (r.amax_history < 1 || r.amax_history > kMaxAmaxHistory) {
      throw bad_option("amax_history must be in [1, " + std::to_string(kMaxAmaxHistory) +
                       "], got " + std::to_string(r.amax_history));
    }
    if (r.margin < 0 || r.margin > 64) {
      throw bad_option("margin must be in [0, 64], got " + std::to_string(r.margin));
    }
    if (!(r.max_finite > 0.0 && r.max_finite <= std::numeric_limits<float>::max())) {
      throw bad_option("max_finite must be a positive float32, got " +
                       std::to_string(r.max_finite));
    }
    m_init_history.assign(static_cast<size_t>(r.amax_history), 0.0f);
  }
}

void GradScaler::lazy_init() {
  if (m_scale.defined()) return;
  Backend& b = *m_backend;
  m_scale = b.empty({1}, DType::f32);
  b.fill(m_scale, m_init_scale);
  m_growth_tracker = b.empty({1}, DType::i32);
  b.fill(m_growth_tracker, static_cast<double>(m_init_growth_tracker));
  m_hysteresis_tracker = b.empty({1}, DType::i32);
  b.fill(m_hysteresis_tracker, static_cast<double>(m_init_hysteresis_tracker));
  m_trackers = b.empty({kTrackerCount}, DType::i32);
  write_trackers();
  m_inv_scale = b.zeros({1}, DType::f32);
  m_ones = b.empty({1}, DType::f32);
  b.fill(m_ones, 1.0);
  m_found_inf_combined = b.zeros({1}, DType::f32);
  if (scale_rule(m_rule.policy).keys.amax_history) {
    m_history = b.empty({m_rule.amax_history}, DType::f32);
    b.upload(m_history, m_init_history.data(), m_init_history.size() * sizeof(float));
  }
}

void GradScaler::write_trackers() {
  m_backend->upload(m_trackers, m_init_trackers.data(), sizeof(m_init_trackers));
}

void GradScaler::check_initialized(const char* funcname) const {
  if (!m_scale.defined()) {
    throw state_error(std::string("Attempted ") + funcname +
                      " but _scale is None.  This may indicate your script did not use "
                      "scaler.scale(loss or outputs) earlier in the iteration.");
  }
}

GradScaler::PerOptimizer& GradScaler::state_of(optim::Optimizer& optimizer) {
  return m_per_optimizer[&optimizer];
}

OptState GradScaler::stage(const optim::Optimizer& optimizer) const {
  auto it = m_per_optimizer.find(&optimizer);
  return it == m_per_optimizer.end() ? OptState::ready : it->second.stage;
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!m_enabled) return outputs;
  lazy_init();
  Tensor out = m_backend->empty(outputs.shape(), outputs.dtype());
  m_backend->mul_scalar_tensor(outputs, m_scale, out);
  return out;
}

void GradScaler::init_state() {
  if (m_enabled) lazy_init();
}

void GradScaler::scale_into(const Tensor& x, const Tensor& out) const {
  if (!m_enabled) {
    m_backend->copy(out, x);
    return;
  }
  check_initialized("scale_into");
  m_backend->mul_scalar_tensor(x, m_scale, out);
}

void GradScaler::record_scale(const Tensor& scale_out) const {
  if (!m_enabled) {
    m_backend->fill(scale_out, 1.0);
    return;
  }
  check_initialized("record_scale");
  m_backend->copy(scale_out, m_scale);
}

void GradScaler::record_update(const optim::Optimizer& optimizer, const Tensor& found_inf_out,
                               const Tensor& growth_out, const Tensor& hysteresis_out,
                               const Tensor& segments_out) const {
  Backend& b = *m_backend;
  if (!m_enabled) {
    b.fill(found_inf_out, 0.0);
    b.fill(growth_out, 0.0);
    b.fill(hysteresis_out, 0.0);
    return;
  }
  check_initialized("record_update");
  b.copy(found_inf_out, m_found_inf_combined);
  b.copy(growth_out, m_growth_tracker);
  b.copy(hysteresis_out, m_hysteresis_tracker);
  if (segments_out.defined()) {
    const Tensor& flags = segment_found_tensor(optimizer);
    if (flags.defined()) b.copy(segments_out, flags);
  }
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) out.push_back(scale(t));
  return out;
}

void GradScaler::unscale_grads(optim::Optimizer& optimizer, PerOptimizer& st, bool check_only) {
  const std::vector<Tensor>& grads = optimizer.grads();
  st.recorded = false;
  if (grads.empty()) return;  // PyTorch records nothing for an optimizer without gradients
  if (!check_only) {
    for (const Tensor& g : grads) {
      if (g.dtype() == DType::f16) throw bad_option("Attempting to unscale FP16 gradients.");
    }
  }
  Backend& b = *m_backend;
  if (!st.found_inf.defined()) st.found_inf = b.empty({1}, DType::f32);
  b.fill(st.found_inf, 0.0);
  if (st.segment_found.defined()) b.fill(st.segment_found, 0.0);
  if (m_norm_out.defined()) {
    // The same check (and unscale), with the norm of the unscaled gradients in the same pass.
    b.inv_scale(m_scale, m_inv_scale);
    b.non_finite_check_unscale_norm_(grads, st.found_inf, m_inv_scale, !check_only, m_norm_out,
                                     st.segment_starts, st.segment_found);
  } else if (check_only) {
    b.non_finite_check_and_unscale_(grads, st.found_inf, m_ones, st.segment_starts,
                                    st.segment_found);
  } else {
    b.inv_scale(m_scale, m_inv_scale);
    b.non_finite_check_and_unscale_(grads, st.found_inf, m_inv_scale, st.segment_starts,
                                    st.segment_found);
  }
  if (m_found_inf_hook) m_found_inf_hook(st.found_inf);
  st.recorded = true;
}

void GradScaler::set_grad_segments(optim::Optimizer& optimizer,
                                   const std::vector<int64_t>& starts) {
  if (!m_enabled) return;
  int64_t total = 0;
  for (const Tensor& g : optimizer.grads()) total += static_cast<int64_t>(g.numel());
  if (starts.empty() || starts[0] != 0) {
    throw bad_option("set_grad_segments: the segment starts must begin with 0");
  }
  std::vector<int32_t> s32(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    if ((i > 0 && starts[i] <= starts[i - 1]) || starts[i] > total ||
        starts[i] > std::numeric_limits<int32_t>::max()) {
      throw bad_option("set_grad_segments: segment start " + std::to_string(i) + " is " +
                       std::to_string(starts[i]) +
                       "; starts must increase strictly, up to at most the " +
                       std::to_string(total) + " gradient elements (and below 2^31)");
    }
    s32[i] = static_cast<int32_t>(starts[i]);
  }
  Backend& b = *m_backend;
  PerOptimizer& st = state_of(optimizer);
  const Shape shape{static_cast<int64_t>(s32.size())};
  st.segment_starts = b.from_host(shape, DType::i32, s32.data());
  st.segment_found = b.zeros(shape, DType::i32);
}

const Tensor& GradScaler::segment_found_tensor(const optim::Optimizer& optimizer) const {
  static const Tensor kNone;
  auto it = m_per_optimizer.find(&optimizer);
  return it == m_per_optimizer.end() ? kNone : it->second.segment_found;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!m_enabled) return;
  check_initialized("unscale_");
  PerOptimizer& st = state_of(optimizer);
  if (st.stage == OptState::unscaled) {
    throw state_error(
        "unscale_() has already been called on this optimizer since the last update().");
  }
  if (st.stage == OptState::stepped) throw state_error("unscale_() is being called after step().");
  unscale_grads(optimizer, st, /*check_only=*/false);
  st.stage = OptState::unscaled;
}

StepStatus GradScaler::step(optim::Optimizer& optimizer) {
  if (!m_enabled) {
    optimizer.step();
    return StepStatus::stepped;
  }
  check_initialized("step");
  PerOptimizer& st = state_of(optimizer);
  if (st.stage == OptState::stepped) {
    throw state_error("step() has already been called since the last update().");
  }

  if (optimizer.supports_amp_scaling()) {
    // The fused path: a check-only pass records found_inf, and the optimizer multiplies the
    // gradients by inv_scale as it reads them (by 1 when unscale_ already did it) and skips on
    // the device when found_inf != 0. No host read.
    const bool already_unscaled = st.stage == OptState::unscaled;
    if (!already_unscaled) unscale_grads(optimizer, st, /*check_only=*/true);
    if (!st.recorded) throw state_error("No inf checks were recorded for this optimizer.");
    if (!already_unscaled) m_backend->inv_scale(m_scale, m_inv_scale);
    if (m_phase_hook) m_phase_hook();
    optimizer.step_amp(st.found_inf, already_unscaled ? m_ones : m_inv_scale);
    st.stage = OptState::stepped;
    return StepStatus::on_device;
  }

  if (st.stage == OptState::ready) unscale_(optimizer);
  if (!st.recorded) throw state_error("No inf checks were recorded for this optimizer.");
  if (m_phase_hook) m_phase_hook();
  // The one host read of the unfused path, as PyTorch's found_inf.item().
  const bool found = m_backend->read_scalar_f32(st.found_inf) != 0.0f;
  StepStatus status = StepStatus::skipped;
  if (!found) {
    optimizer.step();
    status = StepStatus::stepped;
  }
  st.stage = OptState::stepped;
  return status;
}

ScaleUpdateParams GradScaler::update_params() const {
  if (m_growth_interval < 1 || m_growth_interval > std::numeric_limits<int32_t>::max()) {
    throw bad_option("The growth interval must be an integer in [1, 2^31 - 1], got " +
                     std::to_string(m_growth_interval));
  }
  ScaleUpdateParams p = m_rule;
  p.growth_interval = static_cast<int32_t>(m_growth_interval);
  return p;
}

void GradScaler::update() {
  if (!m_enabled) return;
  check_initialized("update");
  Backend& b = *m_backend;
  bool any = false;
  for (auto& [opt, st] : m_per_optimizer) {
    if (!st.recorded) continue;
    if (!any) {
      b.copy(m_found_inf_combined, st.found_inf);
      any = true;
    } else {
      b.add_(m_found_inf_combined, st.found_inf);
    }
  }
  if (!any) throw state_error("No inf checks were recorded prior to update.");
  if (scale_rule(m_rule.policy).reads_amax) {
    if (!m_amax_in.defined()) {
      throw state_error("policy auto: no grad_amax input (set_amax_input) to update from.");
    }
    b.update_scale_auto_(m_scale, m_growth_tracker, m_trackers, m_found_inf_combined, m_amax_in,
                         m_history, update_params());
  } else {
    b.update_scale_(m_scale, m_growth_tracker, m_hysteresis_tracker, m_trackers,
                    m_found_inf_combined, update_params());
  }
  for (auto& [opt, st] : m_per_optimizer) {
    st.stage = OptState::ready;
    st.recorded = false;
  }
}

void GradScaler::update(double new_scale) {
  if (!m_enabled) return;
  check_initialized("update");
  m_backend->fill(m_scale, new_scale);
  for (auto& [opt, st] : m_per_optimizer) {
    st.stage = OptState::ready;
    st.recorded = false;
  }
}

void GradScaler::update(const Tensor& new_scale) {
  if (!m_enabled) return;
  check_initialized("update");
  const char* reason = "new_scale should be a float or a 1-element tensor on the scaler's device.";
  if (!new_scale.defined() || new_scale.device().type != m_backend->device().type ||
      new_scale.numel() != 1 || !is_floating(new_scale.dtype())) {
    throw bad_option(reason);
  }
  m_backend->cast(new_scale, m_scale);
  for (auto& [opt, st] : m_per_optimizer) {
    st.stage = OptState::ready;
    st.recorded = false;
  }
}

double GradScaler::get_scale() const {
  if (!m_enabled) return 1.0;
  if (!m_scale.defined()) return m_init_scale;
  return m_backend->read_scalar_f32(m_scale);
}

int64_t GradScaler::get_growth_tracker() const {
  if (!m_enabled) return 0;
  if (!m_growth_tracker.defined()) return m_init_growth_tracker;
  return m_backend->read_scalar_i32(m_growth_tracker);
}

int32_t GradScaler::get_hysteresis_tracker() const {
  if (!m_enabled) return m_rule.hysteresis;
  if (!m_hysteresis_tracker.defined()) return m_init_hysteresis_tracker;
  return m_backend->read_scalar_i32(m_hysteresis_tracker);
}

nlohmann::json GradScaler::state_dict() const {
  if (!m_enabled) return nlohmann::json::object();
  checkpoint::ScalerState s;
  s.scale = get_scale();
  s.growth_factor = m_rule.growth_factor;
  s.backoff_factor = m_rule.backoff_factor;
  s.growth_interval = m_growth_interval;
  s.growth_tracker = get_growth_tracker();
  // What the rule keeps (its row in scale_rules.h); scaler_state_json writes those keys alone.
  const ScaleRule& rule = scale_rule(m_rule.policy);
  s.policy = rule.name;
  if (*rule.keys.hysteresis_tracker) s.hysteresis_tracker = get_hysteresis_tracker();
  if (rule.keys.amax_history) {
    std::vector<float> ring = m_init_history;
    if (m_history.defined()) m_backend->download(ring.data(), m_history);
    s.amax_history.assign(ring.begin(), ring.end());
  }
  if (counts_iterations(rule)) {
    std::array<int32_t, kTrackerCount> t = m_init_trackers;
    if (m_trackers.defined()) m_backend->download(t.data(), m_trackers);
    s.iter = t[kIter];
    s.last_overflow_iter = t[kLastOverflowIter];
    s.last_rescale_iter = t[kLastRescaleIter];
    s.overflows_since_rescale = t[kOverflowsSinceRescale];
  }
  return checkpoint::scaler_state_json(s);
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  load_state(state, /*take_settings=*/true);
}

void GradScaler::load_progress(const nlohmann::json& state) {
  load_state(state, /*take_settings=*/false);
}

void GradScaler::load_state(const nlohmann::json& state, bool take_settings) {
  if (!m_enabled) return;
  if (!state.is_object()) {
    throw Error{ErrorKind::input,
                std::string("scaler state_dict must be an object, got ") + state.type_name()};
  }
  if (state.empty()) {
    throw Error{ErrorKind::input,
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."};
  }
  const checkpoint::ScalerState s = checkpoint::parse_scaler_state(state);
  const bool same_rule = s.policy == scale_rule(m_rule.policy).name;
  // The one check that depends on this scaler's settings (parse_scaler_state does the rest).
  // load_progress keeps a lowered hysteresis: the counter then starts at the new one.
  const int32_t hysteresis = m_rule.hysteresis;
  if (same_rule && s.hysteresis_tracker && *s.hysteresis_tracker > hysteresis && take_settings) {
    throw Error{ErrorKind::input,
                "scaler state_dict: the hysteresis counter must be in [0, "
                "hysteresis = " +
                    std::to_string(hysteresis) + "], got " + std::to_string(*s.hysteresis_tracker)};
  }
  if (take_settings) {
    m_rule.growth_factor = s.growth_factor;
    m_rule.backoff_factor = s.backoff_factor;
    m_growth_interval = s.growth_interval;
  }
  m_init_scale = s.scale;
  // Another rule's counters mean other things: this rule starts its own afresh.
  m_init_growth_tracker = same_rule ? s.growth_tracker : 0;
  m_init_hysteresis_tracker =
      same_rule && s.hysteresis_tracker
          ? static_cast<int32_t>(std::min<int64_t>(*s.hysteresis_tracker, hysteresis))
          : hysteresis;
  m_init_trackers = kInitialTrackers;
  if (same_rule) {
    if (s.iter) m_init_trackers[kIter] = static_cast<int32_t>(*s.iter);
    if (s.last_overflow_iter) {
      m_init_trackers[kLastOverflowIter] = static_cast<int32_t>(*s.last_overflow_iter);
    }
    if (s.last_rescale_iter) {
      m_init_trackers[kLastRescaleIter] = static_cast<int32_t>(*s.last_rescale_iter);
    }
    if (s.overflows_since_rescale) {
      m_init_trackers[kOverflowsSinceRescale] = static_cast<int32_t>(*s.overflows_since_rescale);
    }
  }
  if (scale_rule(m_rule.policy).keys.amax_history) {
    // The ring, slot (iter - 1 - j) % length for the j-th most recent update. A checkpoint
    // written with another amax_history (resume --set scaler.amax_history=N) keeps its most
    // recent min(old, new) values, each in the slot the new length gives it.
    std::fill(m_init_history.begin(), m_init_history.end(), 0.0f);
    if (same_rule) {
      const int64_t it = m_init_trackers[kIter];
      const auto old_n = static_cast<int64_t>(s.amax_history.size());
      const auto new_n = static_cast<int64_t>(m_init_history.size());
      for (int64_t j = 0; j < std::min({old_n, new_n, it}); ++j) {
        const int64_t u = it - 1 - j;
        m_init_history[static_cast<size_t>(u % new_n)] =
            static_cast<float>(s.amax_history[static_cast<size_t>(u % old_n)]);
      }
    }
  }
  if (m_scale.defined()) {
    m_backend->fill(m_scale, m_init_scale);
    m_backend->fill(m_growth_tracker, static_cast<double>(m_init_growth_tracker));
    m_backend->fill(m_hysteresis_tracker, static_cast<double>(m_init_hysteresis_tracker));
    write_trackers();
    if (m_history.defined()) {
      m_backend->upload(m_history, m_init_history.data(), m_init_history.size() * sizeof(float));
    }
  }
}

}  // namespace ampctl::amp
