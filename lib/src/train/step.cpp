#include "ampctl/train/step.h"

#include <span>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/monitor.h"
#include "ampctl/train/numerics.h"
#include "ampctl/train/signals.h"

namespace ampctl::train {

TrainStep::TrainStep(const StepParts& parts, const StepOptions& options)
    : m_p(parts), m_opts(options) {
  Backend& b = parts.backend;
  m_loss = b.zeros({1}, DType::f32);
  m_loss_acc = b.zeros({1}, DType::f32);
  m_accum_inv = b.empty({1}, DType::f32);
  b.fill(m_accum_inv, 1.0 / static_cast<double>(options.grad_accum_steps));
  m_seed = b.zeros({1}, DType::f32);
  m_norm = b.zeros({1}, DType::f32);
  m_coef = b.zeros({1}, DType::f32);
  m_inject_at = parts.model.grads().view(options.inject_offset, {1});
  m_inject_here = options.inject_rank < 0 || options.inject_rank == parts.comm.rank();
  // The scaler's state exists before the first step, so no step allocates it.
  parts.scaler.init_state();
}

bool TrainStep::run(int64_t step) {
  Backend& b = m_p.backend;
  nn::Model& model = m_p.model;
  amp::GradScaler& scaler = m_p.scaler;
  Monitor& mon = m_p.monitor;
  const double lr = m_p.schedule.lr_at(step - 1);
  m_p.schedule.apply(step - 1, m_p.optimizer.param_groups());

  // The backward seed: the loss scale (the scaled loss's gradient), divided by the number of
  // micro-batches as PyTorch's recipe divides the loss.
  const int64_t accum = m_opts.grad_accum_steps;
  scaler.scale_into(m_accum_inv, m_seed);
  mon.record_scale();

  model.zero_grad();
  b.fill(m_loss_acc, 0.0);
  // A sampled step counts its gradient roundings (train/numerics.h); the others cost nothing.
  NumericsRecorder* numerics = m_p.numerics && m_p.numerics->sampled(step) ? m_p.numerics : nullptr;
  if (numerics) numerics->begin();
  int64_t samples = 0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    // A host flag, no device sync; the step boundary checks before the first micro-batch. With
    // several ranks only the boundary's agreed check stops (every rank must reach the sync).
    if (micro > 0 && m_p.comm.world_size() == 1 && stop_signal() != 0) {
      if (numerics) numerics->end();
      return false;
    }
    const Batch& batch = m_p.batcher.next();
    mon.phase_end(kData);
    model.forward(batch.input, batch.rows, /*training=*/true);
    model.loss(batch.target, batch.rows, m_loss, Tensor{}, m_seed);
    mon.phase_end(kForward);
    model.backward(batch.rows);
    b.add_(m_loss_acc, m_loss, 1.0f / static_cast<float>(accum));
    samples += batch.rows;
    mon.phase_end(kBackward);
  }
  if (numerics) numerics->end();
  if (m_inject_here && m_opts.inject_at.count(step)) b.fill(m_inject_at, m_opts.inject_value);

  // Data parallel: the gradients (and the logged loss) become the mean over the ranks, taken in
  // f32 in rank order (dist/communicator.h), so every rank holds the same bits and reaches the
  // same found_inf; the identity for one process.
  m_p.comm.all_reduce(model.grads(), dist::ReduceOp::mean);
  m_p.comm.all_reduce(m_loss_acc, dist::ReduceOp::mean);

  if (m_opts.grad_clip_norm) {
    // PyTorch's recipe: unscale first so the norm and the threshold are in real units.
    scaler.unscale_(m_p.optimizer);
    const Tensor grads = model.grads();
    b.global_norm(std::span<const Tensor>(&grads, 1), m_norm);
    b.clip_coef(m_norm, static_cast<float>(*m_opts.grad_clip_norm), m_coef);
    b.mul_scalar_tensor(grads, m_coef, grads);
  }

  // The scaler's phase hook closes the unscale/check phase inside step(); without a scaler
  // (bf16, fp32) only clipping, if any, is in it.
  if (!scaler.is_enabled()) mon.phase_end(kUnscale);
  scaler.step(m_p.optimizer);
  mon.phase_end(kOptimizer);
  scaler.update();
  mon.phase_end(kUpdate);
  mon.record_step(step, lr, m_loss_acc, samples);
  return true;
}

}  // namespace ampctl::train
