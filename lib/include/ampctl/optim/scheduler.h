// Learning-rate schedules as pure functions of the iteration index, so a resume needs only the
// step (no hidden state), and the lr of skipped steps advances as PyTorch's scheduler.step()
// does when called every iteration.
//
// t is the 0-based optimizer iteration (skipped ones included); lr_at(t) is the lr that
// iteration uses. With W = warmup_steps and T = the schedule's length (scheduler.decay_steps, or
// training.max_steps; past T linear and cosine hold min_lr, the others their lr at T - 1):
//   warm-up (constant, linear, cosine, step), t < W:  base * t / W
//       (Hugging Face's get_*_schedule_with_warmup: the first iteration runs at lr 0)
//   constant:  base
//   linear:    min_lr + (base - min_lr) * max(0, (T - t) / (T - W))
//   cosine:    min_lr + (base - min_lr) * (1 + cos(pi * (t - W) / (T - W))) / 2
//              (CosineAnnealingLR's closed form with eta_min = min_lr, T_max = T - W)
//   step:      base * gamma ^ floor((t - W) / step_size)   (StepLR)
//   onecycle:  torch.optim.lr_scheduler.OneCycleLR with total_steps = T, its phases, its
//              end_step = pct_start * T - 1 arithmetic and its cos / linear annealing; with
//              cycle_momentum (PyTorch's default) momentum_at(t) runs the same phases from
//              max_momentum down to base_momentum and back (inversely to the lr; the third
//              phase of three_phase holds max_momentum), for SGD's momentum or Adam's beta1
// All arithmetic in double, as Python's. Every value is a function of t alone, so a resume needs
// only the step, momentum included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/optim/optimizer.h"
#include "ampctl/optim/schedule_kinds.h"

namespace ampctl::optim {

// ScheduleType and Anneal, and their names: optim/schedule_kinds.h.

// What a schedule needs, as plain values (the train layer fills it from the run's config; the
// reference lists the keys). Members that do not apply to `type` are ignored.
struct ScheduleOptions {
  ScheduleType type = ScheduleType::constant;
  int64_t warmup_steps = 0;       // all but onecycle
  double min_lr = 0.0;            // linear, cosine
  int64_t step_size = 100;        // step
  double gamma = 0.1;             // step
  double max_lr = 1e-3;           // onecycle
  double pct_start = 0.3;         // onecycle
  double div_factor = 25.0;       // onecycle
  double final_div_factor = 1e4;  // onecycle
  Anneal anneal = Anneal::cos;    // onecycle
  bool three_phase = false;       // onecycle
  bool cycle_momentum = true;     // onecycle: PyTorch's OneCycleLR defaults
  double base_momentum = 0.85;    // onecycle, cycle_momentum
  double max_momentum = 0.95;     // onecycle, cycle_momentum
};

class LrSchedule {
 public:
  // Throws Error{invalid_argument} when total_steps < 1.
  LrSchedule(const ScheduleOptions& options, double base_lr, int64_t total_steps);

  double lr_at(int64_t t) const;
  // The momentum (SGD) or beta1 (Adam, AdamW) iteration t uses when this schedule sets it
  // (onecycle with cycle_momentum), else nullopt: the optimizer keeps its own.
  std::optional<double> momentum_at(int64_t t) const;
  // Sets every group's lr and momentum for iteration t (what PyTorch's scheduler.step() leaves in
  // param_groups before that iteration). Host values only: no device work.
  void apply(int64_t t, std::vector<ParamGroup>& groups) const;
  // A description for logs: "cosine (warm-up 100, min_lr 1e-05, 1000 steps)".
  std::string describe() const;

 private:
  ScheduleOptions m_options;
  double m_base;
  int64_t m_total;
};

}  // namespace ampctl::optim
