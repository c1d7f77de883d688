#include "ampctl/train/step.h"

#include <span>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/nn/numerics.h"
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
  // grad_norm: with loss scaling and the whole arena checked on every rank, the scaler's check
  // pass computes it (no second read of the gradients); run() takes global_norm otherwise.
  m_fused_norm = parts.scaler.is_enabled() && !options.zero;
  if (m_fused_norm) parts.scaler.set_norm_output(m_norm);
  if (options.zero && parts.model.lowp_params().defined()) {
    // The other ranks' ranges of the masters and of the fp16/bf16 copy, as views made once.
    const size_t n = parts.model.params().numel();
    for (int r = 0; r < parts.comm.world_size(); ++r) {
      if (r == parts.comm.rank()) continue;
      const dist::Communicator::Range range =
          dist::Communicator::shard_range(n, r, parts.comm.world_size());
      const Shape shape{static_cast<int64_t>(range.size())};
      m_other_shards.emplace_back(parts.model.params().view(range.begin, shape),
                                  parts.model.lowp_params().view(range.begin, shape));
    }
  }
  if (options.retry && options.min_scale > 0.0f) m_attempt_scale = b.zeros({1}, DType::f32);
  if (options.retry) {
    for (const auto& [name, t] : parts.model.state_buffers()) {
      m_buffers.emplace_back(t, b.empty(t.shape(), t.dtype()));
    }
  }
  if (options.zero) {
    // ZeRO-1: each rank checks only its shard of the gradients; found_inf becomes the max over
    // the ranks before the optimizer or update() reads it, so every rank skips the same steps
    // and keeps the same scale (exact: a max of 0s and 1s).
    dist::Communicator* comm = &parts.comm;
    parts.scaler.set_found_inf_hook(
        [comm](const Tensor& found_inf) { comm->all_reduce(found_inf, dist::ReduceOp::max); });
  }
}

bool TrainStep::run(int64_t step) {
  Monitor& mon = m_p.monitor;
  const double lr = m_p.schedule.lr_at(step - 1);
  m_p.schedule.apply(step - 1, m_p.optimizer.param_groups());
  m_retries = 0;
  // Where the step starts: a retry runs its micro-batches again from here. Two integers and a
  // counter, read without allocating.
  const Batcher::Cursor cursor = m_p.batcher.cursor();
  const uint64_t dropout_calls = m_p.model.rng_position();
  for (const auto& [buffer, saved] : m_buffers) m_p.backend.copy(saved, buffer);
  int64_t samples = 0;
  for (int64_t a = 0;; ++a) {
    if (!attempt(step, a, samples)) return false;
    if (!m_opts.retry || a == m_opts.max_retries) break;
    // The retry decision, the same on every rank: found_inf of this update() is the max over
    // the ranks (ZeRO-1: the scaler's found_inf hook) or was computed from gradients that are
    // bitwise the same on every rank (ZeRO-0: the all-reduced mean). The one host read retry
    // adds to a GPU step: it waits for the attempt to finish (docs/design.md).
    const bool overflowed = m_p.backend.read_scalar_f32(m_p.scaler.found_inf_tensor()) != 0.0f;
    if (!overflowed) break;
    // At the floor scaler.min_scale the backoff cannot lower the scale: another attempt would
    // be the same computation (the same batches, masks and scale) and overflow the same way. The
    // step is skipped at once (and scaler.on_min_scale: stop acts on it). An injected first
    // attempt is the exception: the injection poisons it alone, so its retry differs. The scale
    // and the injected steps are the same on every rank, so is the decision.
    const bool injected = a == 0 && m_opts.inject_at.count(step) != 0;
    if (m_attempt_scale.defined() && !injected &&
        m_p.backend.read_scalar_f32(m_attempt_scale) <= m_opts.min_scale) {
      break;
    }
    // A stop request between attempts (one process: with several ranks only the step
    // boundary's agreed check stops): the overflowing attempt is kept, a skipped step as with
    // on_overflow: skip, and the loop stops after it.
    if (m_p.comm.world_size() == 1 && stop_signal() != 0) break;
    ++m_retries;
    m_p.batcher.rewind(cursor);
    m_p.model.rewind_rng(dropout_calls);
    for (const auto& [buffer, saved] : m_buffers) m_p.backend.copy(buffer, saved);
  }
  mon.record_grad_norm(m_norm);
  // The kept attempt's grad_amax (a retry measured its own roundings over again).
  if (m_opts.grad_amax && m_p.model.roundings_instrumented()) {
    mon.record_grad_amax(m_p.model.numerics()->amax());
  }
  mon.record_step(step, lr, m_loss_acc, samples, m_retries);
  return true;
}

bool TrainStep::attempt(int64_t step, int64_t attempt_index, int64_t& samples) {
  Backend& b = m_p.backend;
  nn::Model& model = m_p.model;
  amp::GradScaler& scaler = m_p.scaler;
  Monitor& mon = m_p.monitor;

  // The backward seed: the loss scale (the scaled loss's gradient), divided by the number of
  // micro-batches as PyTorch's recipe divides the loss.
  const int64_t accum = m_opts.grad_accum_steps;
  scaler.scale_into(m_accum_inv, m_seed);
  // A retry overwrites it: the line reports the kept attempt's scale (the first attempt's is
  // kept apart, for summary.json's max_scale).
  mon.record_scale(/*first_attempt=*/attempt_index == 0);

  model.zero_grad();
  b.fill(m_loss_acc, 0.0);
  // With logging.grad_amax every step of an instrumented fp16/bf16 model measures grad_amax at
  // its roundings; a sampled step counts them (train/numerics.h), and measures it too.
  nn::GradNumerics* hook =
      m_opts.grad_amax && model.roundings_instrumented() ? model.numerics() : nullptr;
  NumericsRecorder* numerics = m_p.numerics && m_p.numerics->sampled(step) ? m_p.numerics : nullptr;
  if (numerics) {
    numerics->begin();
  } else if (hook) {
    hook->begin(/*count=*/false);
  }
  nn::GradNumerics* active = numerics ? model.numerics() : hook;  // what to end
  samples = 0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    // A host flag, no device sync; the step boundary checks before the first micro-batch. With
    // several ranks only the boundary's agreed check stops (every rank must reach the sync). A
    // retry does not look: the scaler has already taken the step's first attempt, so the step
    // cannot be abandoned any more (run() checks between attempts instead).
    if (micro > 0 && attempt_index == 0 && m_p.comm.world_size() == 1 && stop_signal() != 0) {
      if (active) active->end();
      return false;
    }
    const Batch& batch = m_p.batcher.next();
    mon.phase_end(kData);
    model.forward(batch.input, batch.rows, /*training=*/true);
    model.loss(batch.target, batch.rows, m_loss, Tensor{}, m_seed);
    mon.phase_end(kForward);
    model.backward(batch.rows);
    b.add_(m_loss_acc, m_loss, 1.0f / static_cast<float>(accum));
    samples += batch.global_rows;  // every rank's rows: samples/s and totals are global
    mon.phase_end(kBackward);
  }
  if (active) active->end();
  if (hook && m_p.comm.world_size() > 1) {
    // The max over the ranks' roundings: what one process running the ranks' micro-batches in
    // turn would have seen (a max of floats: exact, the same on every rank).
    m_p.comm.all_reduce(hook->amax(), dist::ReduceOp::max);
  }
  // Only the first attempt: a retry recomputes the same gradients cleanly.
  if (m_inject_here && attempt_index == 0 && m_opts.inject_at.count(step)) {
    b.fill(m_inject_at, m_opts.inject_value);
  }

  // Data parallel: the gradients (and the logged loss) become the mean over the ranks, taken in
  // f32 in rank order (dist/communicator.h), so every rank holds the same bits and reaches the
  // same found_inf; the identity for one process. ZeRO-1 needs only this rank's shard of the
  // mean (the half of the all-reduce before its all-gather): the same bits there.
  if (m_opts.zero) {
    m_p.comm.reduce_scatter(model.grads(), dist::ReduceOp::mean);
  } else {
    m_p.comm.all_reduce(model.grads(), dist::ReduceOp::mean);
  }
  m_p.comm.all_reduce(m_loss_acc, dist::ReduceOp::mean);

  // grad_norm, the global norm of the unscaled gradients, every step (clipped or not). Without
  // clipping and with the fused norm it comes from the check inside scaler.step() below.
  if (m_opts.grad_clip_norm || !m_fused_norm) {
    // PyTorch's recipe: unscale first so the norm and the threshold are in real units. (An
    // explicit unscale_ stores round(g * inv), the float the fused optimizer would compute from
    // g as it reads it, and the optimizer then multiplies by 1: the same update bits.)
    scaler.unscale_(m_p.optimizer);
    const Tensor grads = model.grads();
    if (!m_fused_norm) {
      // ZeRO-1: every rank unscaled its own shard; gathering them gives every rank the whole
      // unscaled mean, bitwise ZeRO-0's, and so bitwise ZeRO-0's norm. (A sum of per-shard sums
      // of squares would round differently from global_norm's fixed-order double sum
      // (backend.h); docs/distributed.md, "ZeRO-1".)
      if (m_opts.zero) m_p.comm.all_gather_shards(grads);
      b.global_norm(std::span<const Tensor>(&grads, 1), m_norm);
    }
    if (m_opts.grad_clip_norm) {
      b.clip_coef(m_norm, static_cast<float>(*m_opts.grad_clip_norm), m_coef);
      b.mul_scalar_tensor(grads, m_coef, grads);
    }
  }

  // The scaler's phase hook closes the unscale/check phase inside step(); without a scaler
  // (bf16, fp32) only clipping, if any, is in it.
  if (!scaler.is_enabled()) mon.phase_end(kUnscale);
  scaler.step(m_p.optimizer);
  if (m_opts.zero) {
    // Each rank updated its shard of the f32 masters and of their fp16/bf16 copy (one pass,
    // or left both as they were on a skipped step): every rank takes every master shard, and
    // rounds the others' into its copy (round to nearest even has one answer: the owner's
    // bits). Only f32 crosses the wire, as much as ZeRO-0's gradient all-gather.
    m_p.comm.all_gather_shards(model.params());
    for (const auto& [master, lowp] : m_other_shards) b.cast(master, lowp);
  }
  mon.phase_end(kOptimizer);
  // The scale this attempt ran at, for the retry decision at the floor (run()).
  if (m_attempt_scale.defined()) scaler.record_scale(m_attempt_scale);
  scaler.update();
  mon.phase_end(kUpdate);
  return true;
}

}  // namespace ampctl::train
