// Learning-rate schedules as pure functions of the iteration index, so a resume needs only the
// step (no hidden state), and the lr of skipped steps advances as PyTorch's scheduler.step()
// does when called every iteration.
//
// t is the 0-based optimizer iteration (skipped ones included); lr_at(t) is the lr that
// iteration uses. With W = warmup_steps and T = training.max_steps:
//   warm-up (constant, linear, cosine, step), t < W:  base * t / W
//       (Hugging Face's get_*_schedule_with_warmup: the first iteration runs at lr 0)
//   constant:  base
//   linear:    min_lr + (base - min_lr) * max(0, (T - t) / (T - W))
//   cosine:    min_lr + (base - min_lr) * (1 + cos(pi * (t - W) / (T - W))) / 2
//              (CosineAnnealingLR's closed form with eta_min = min_lr, T_max = T - W)
//   step:      base * gamma ^ floor((t - W) / step_size)   (StepLR)
//   onecycle:  torch.optim.lr_scheduler.OneCycleLR with total_steps = T, its phases, its
//              end_step = pct_start * T - 1 arithmetic and its cos / linear annealing
//              (momentum is not cycled: cycle_momentum=False)
// All arithmetic in double, as Python's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "ampctl/config/run_config.h"

namespace ampctl::optim {

class LrSchedule {
 public:
  LrSchedule(const config::SchedulerConfig& config, double base_lr, int64_t total_steps);

  double lr_at(int64_t t) const;
  // A description for logs: "cosine (warm-up 100, min_lr 1e-05, 1000 steps)".
  std::string describe() const;

 private:
  config::SchedulerConfig m_config;
  double m_base;
  int64_t m_total;
};

}  // namespace ampctl::optim
