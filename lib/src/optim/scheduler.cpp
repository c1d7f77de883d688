#include "ampctl/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "ampctl/core/error.h"

namespace ampctl::optim {
namespace {

const char* type_name(ScheduleType t) {
  switch (t) {
    case ScheduleType::constant:
      return "constant";
    case ScheduleType::linear:
      return "linear";
    case ScheduleType::cosine:
      return "cosine";
    case ScheduleType::step:
      return "step";
    case ScheduleType::onecycle:
      return "onecycle";
  }
  return "?";
}

double anneal(Anneal s, double start, double end, double pct) {
  if (s == Anneal::cos) {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

// OneCycleLR's phases (torch/optim/lr_scheduler.py, OneCycleLR._schedule_phases): where each
// ends, and the lr and momentum it anneals between.
struct Phase {
  double end_step, start_lr, end_lr, start_momentum, end_momentum;
};

// The phase iteration t falls in and how far into it (OneCycleLR.get_lr's loop).
struct PhasePoint {
  Phase phase;
  double pct;
};

PhasePoint onecycle_point(const ScheduleOptions& c, int64_t total_steps, int64_t t) {
  const double total = static_cast<double>(total_steps);
  const double initial = c.max_lr / c.div_factor;
  const double final_lr = initial / c.final_div_factor;
  const double lo = c.base_momentum, hi = c.max_momentum;
  Phase phases[3];
  int n = 0;
  if (c.three_phase) {
    phases[n++] = {c.pct_start * total - 1.0, initial, c.max_lr, hi, lo};
    phases[n++] = {2.0 * c.pct_start * total - 2.0, c.max_lr, initial, lo, hi};
    phases[n++] = {total - 1.0, initial, final_lr, hi, hi};
  } else {
    phases[n++] = {c.pct_start * total - 1.0, initial, c.max_lr, hi, lo};
    phases[n++] = {total - 1.0, c.max_lr, final_lr, lo, hi};
  }
  const double step = static_cast<double>(t);
  double start_step = 0.0;
  for (int i = 0;; ++i) {
    if (step <= phases[i].end_step || i == n - 1) {
      return {phases[i], (step - start_step) / (phases[i].end_step - start_step)};
    }
    start_step = phases[i].end_step;
  }
}

}  // namespace

LrSchedule::LrSchedule(const ScheduleOptions& options, double base_lr, int64_t total_steps)
    : m_options(options), m_base(base_lr), m_total(total_steps) {
  if (total_steps < 1) {
    throw Error{ErrorKind::invalid_argument, "a schedule needs at least one step"};
  }
}

double LrSchedule::lr_at(int64_t t) const {
  const auto& c = m_options;
  // Past the schedule's length the lr holds where the decay ends (nanoGPT's lr_decay_iters):
  // linear and cosine reach min_lr at t = T exactly, onecycle its final lr at T - 1. Inside a
  // run of T steps t never exceeds T - 1, so this bound only matters to a schedule shorter than
  // the run (scheduler.decay_steps).
  const bool decays_to_t = c.type == ScheduleType::linear || c.type == ScheduleType::cosine;
  t = std::clamp<int64_t>(t, 0, decays_to_t ? m_total : m_total - 1);
  if (c.type == ScheduleType::onecycle) {
    const PhasePoint at = onecycle_point(c, m_total, t);
    return anneal(c.anneal, at.phase.start_lr, at.phase.end_lr, at.pct);
  }
  const int64_t w = c.warmup_steps;
  if (t < w) return m_base * static_cast<double>(t) / static_cast<double>(w);
  switch (c.type) {
    case ScheduleType::constant:
      return m_base;
    case ScheduleType::linear: {
      const double span = static_cast<double>(std::max<int64_t>(1, m_total - w));
      const double f = std::max(0.0, static_cast<double>(m_total - t) / span);
      return c.min_lr + (m_base - c.min_lr) * f;
    }
    case ScheduleType::cosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, m_total - w));
      const double progress = static_cast<double>(t - w) / span;
      return c.min_lr + (m_base - c.min_lr) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    }
    case ScheduleType::step:
      return m_base * std::pow(c.gamma, static_cast<double>((t - w) / c.step_size));
    case ScheduleType::onecycle:
      break;
  }
  return m_base;
}

std::optional<double> LrSchedule::momentum_at(int64_t t) const {
  if (m_options.type != ScheduleType::onecycle || !m_options.cycle_momentum) return std::nullopt;
  const PhasePoint at = onecycle_point(m_options, m_total, std::clamp<int64_t>(t, 0, m_total - 1));
  return anneal(m_options.anneal, at.phase.start_momentum, at.phase.end_momentum, at.pct);
}

void LrSchedule::apply(int64_t t, std::vector<ParamGroup>& groups) const {
  const double lr = lr_at(t);
  const std::optional<double> momentum = momentum_at(t);
  for (ParamGroup& g : groups) {
    g.lr = lr;
    g.momentum = momentum;
  }
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  os << type_name(m_options.type);
  if (m_options.type == ScheduleType::onecycle) {
    os << " (max_lr " << m_options.max_lr << ", pct_start " << m_options.pct_start;
    if (m_options.cycle_momentum) {
      os << ", momentum " << m_options.max_momentum << " -> " << m_options.base_momentum;
    }
    os << ", " << m_total << " steps)";
  } else if (m_options.warmup_steps > 0) {
    os << " (warm-up " << m_options.warmup_steps << ", " << m_total << " steps)";
  } else if (m_options.type == ScheduleType::linear || m_options.type == ScheduleType::cosine) {
    os << " (" << m_total << " steps)";
  }
  return os.str();
}

}  // namespace ampctl::optim
