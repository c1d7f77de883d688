#include "ampctl/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <sstream>
#include "ampctl/core/error.h"

namespace ampctl::optim {
namespace {

using config::AnnealStrategy;
using config::SchedulerType;

double anneal(AnnealStrategy s, double start, double end, double pct) {
  if (s == AnnealStrategy::cos) {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

}  // namespace

LrSchedule::LrSchedule(const config::SchedulerConfig& config, double base_lr, int64_t total_steps)
    : m_config(config), m_base(base_lr), m_total(total_steps) {
  if (total_steps < 1) {
    throw Error{ErrorKind::invalid_argument, "a schedule needs at least one step"};
  }
}

double LrSchedule::lr_at(int64_t t) const {
  const auto& c = m_config;
  t = std::clamp<int64_t>(t, 0, m_total - 1);
  if (c.type == SchedulerType::onecycle) {
    const double total = static_cast<double>(m_total);
    const double initial = c.max_lr / c.div_factor;
    const double final_lr = initial / c.final_div_factor;
    struct Phase {
      double end_step, start_lr, end_lr;
    };
    Phase phases[3];
    int n = 0;
    if (c.three_phase) {
      phases[n++] = {c.pct_start * total - 1.0, initial, c.max_lr};
      phases[n++] = {2.0 * c.pct_start * total - 2.0, c.max_lr, initial};
      phases[n++] = {total - 1.0, initial, final_lr};
    } else {
      phases[n++] = {c.pct_start * total - 1.0, initial, c.max_lr};
      phases[n++] = {total - 1.0, c.max_lr, final_lr};
    }
    const double step = static_cast<double>(t);
    double start_step = 0.0;
    for (int i = 0; i < n; ++i) {
      if (step <= phases[i].end_step || i == n - 1) {
        const double pct = (step - start_step) / (phases[i].end_step - start_step);
        return anneal(c.anneal_strategy, phases[i].start_lr, phases[i].end_lr, pct);
      }
      start_step = phases[i].end_step;
    }
  }
  const int64_t w = c.warmup_steps;
  if (t < w) return m_base * static_cast<double>(t) / static_cast<double>(w);
  switch (c.type) {
    case SchedulerType::constant:
      return m_base;
    case SchedulerType::linear: {
      const double span = static_cast<double>(std::max<int64_t>(1, m_total - w));
      const double f = std::max(0.0, static_cast<double>(m_total - t) / span);
      return c.min_lr + (m_base - c.min_lr) * f;
    }
    case SchedulerType::cosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, m_total - w));
      const double progress = static_cast<double>(t - w) / span;
      return c.min_lr + (m_base - c.min_lr) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    }
    case SchedulerType::step:
      return m_base * std::pow(c.gamma, static_cast<double>((t - w) / c.step_size));
    case SchedulerType::onecycle:
      break;
  }
  return m_base;
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  os << config::to_string(m_config.type);
  if (m_config.type == SchedulerType::onecycle) {
    os << " (max_lr " << m_config.max_lr << ", pct_start " << m_config.pct_start << ", " << m_total
       << " steps)";
  } else if (m_config.warmup_steps > 0) {
    os << " (warm-up " << m_config.warmup_steps << ", " << m_total << " steps)";
  }
  return os.str();
}

}  // namespace ampctl::optim
