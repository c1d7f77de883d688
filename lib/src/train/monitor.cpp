#include "ampctl/train/monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/math/nn_math.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/run/metrics_line.h"
#include "ampctl/run/numbers.h"
#include "ampctl/train/numerics.h"

namespace ampctl::train {
namespace {

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  // Two units at most, as a person says it: "42s", "3m07s", "2h05m".
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  }
  return buf;
}

}  // namespace

std::string join_names(const std::vector<std::string>& names, size_t max) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > max) out += " and " + std::to_string(names.size() - max) + " more";
  return out;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Streak::extend(int64_t step, const int32_t* flags) {
  if (length++ == 0) first_step = step;
  if (flags == nullptr) return;
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += flags[i] != 0;
}

void Streak::reset() {
  length = 0;
  first_step = 0;
  std::fill(counts.begin(), counts.end(), 0);
}

bool MetricTracker::update(int64_t step, double loss, std::optional<double> accuracy) {
  if (!active()) return false;
  const bool lower = metric == "eval_loss" ||
                     (metric.size() > 5 && metric.compare(metric.size() - 5, 5, ".loss") == 0);
  const std::optional<double> v =
      lower ? (std::isfinite(loss) ? std::optional<double>(loss) : std::nullopt) : accuracy;
  const bool improved = v && (!best || (lower ? *v < *best - min_delta : *v > *best + min_delta));
  if (improved) {
    best = v;
    best_step = step;
    since = 0;
  } else {
    ++since;
  }
  return improved;
}

nlohmann::json MetricTracker::to_json() const {
  return {{"metric", metric},
          {"best", best ? nlohmann::json(*best) : nlohmann::json()},
          {"best_step", best_step},
          {"since", since}};
}

void MetricTracker::restore(const nlohmann::json& j) {
  if (!j.is_object() || j.value("metric", std::string()) != metric) return;
  const auto b = j.find("best");
  best = b != j.end() && b->is_number() ? std::optional<double>(b->get<double>()) : std::nullopt;
  best_step = j.value("best_step", int64_t{0});
  since = j.value("since", int64_t{0});
}

Monitor::Monitor(Backend& backend, amp::GradScaler& scaler, optim::Optimizer& optimizer,
                 const FlatLayout& layout, const MonitorOptions& options)
    : m_backend(&backend),
      m_scaler(&scaler),
      m_opt(&optimizer),
      m_opts(options),
      m_layout(layout),
      m_t0(options.start) {
  Backend& b = backend;
  std::vector<int64_t> starts;
  for (const FlatLayout::Entry& e : layout.entries()) {
    m_param_names.push_back(e.name);
    starts.push_back(static_cast<int64_t>(e.offset));
  }
  const size_t n_params = m_param_names.size();
  m_overflow_counts.assign(n_params, 0);
  m_floor_streak.counts.assign(n_params, 0);
  m_loss_streak.counts.assign(n_params, 0);
  m_scale_floor = options.min_scale > 0 ? static_cast<float>(options.min_scale) : FLT_MIN;

  // One segment of the gradient arena per parameter tensor: the scaler's check pass tells which
  // of them held an inf or NaN.
  const bool attribute = scaler.is_enabled() && !starts.empty() && optimizer.grads().size() == 1 &&
                         optimizer.grads()[0].numel() == layout.total();
  if (attribute) scaler.set_grad_segments(optimizer, starts);

  m_ring.capacity = std::clamp<int64_t>(options.ring_steps, 1, 1024);
  m_ring.f = b.zeros({m_ring.capacity, StepRing::kF}, DType::f32);
  m_ring.i = b.zeros({m_ring.capacity, StepRing::kI}, DType::i32);
  m_ring.host_f.resize(static_cast<size_t>(m_ring.capacity * StepRing::kF));
  m_ring.host_i.resize(static_cast<size_t>(m_ring.capacity * StepRing::kI));
  m_ring.segments = attribute ? static_cast<int64_t>(n_params) : 0;
  if (attribute) m_ring.seg = b.zeros({m_ring.capacity, m_ring.segments}, DType::i32);
  m_ring.host_seg.assign(static_cast<size_t>(m_ring.capacity * m_ring.segments), 0);
  m_ring.info.reserve(static_cast<size_t>(m_ring.capacity));
  m_int_counts.assign(static_cast<size_t>(m_ring.segments), 0);
  m_keep_best.metric = options.keep_best;
  m_keep_best.set = options.keep_best_set;
  m_early_stop.metric = options.early_stop;
  m_early_stop.set = options.early_stop_set;
  m_early_stop.min_delta = options.early_stop_min_delta;
}

nlohmann::json Monitor::trackers_json() const {
  nlohmann::json j = nlohmann::json::object();
  if (m_keep_best.active()) j["keep_best"] = m_keep_best.to_json();
  if (m_early_stop.active()) j["early_stop"] = m_early_stop.to_json();
  return j;
}

void Monitor::restore_trackers(const nlohmann::json& j) {
  if (j.contains("keep_best")) m_keep_best.restore(j.at("keep_best"));
  if (j.contains("early_stop")) m_early_stop.restore(j.at("early_stop"));
}

void Monitor::open_metrics(const std::filesystem::path& path, bool append) {
  m_metrics_path = path;
  if (!m_writer) return;
  m_metrics.open(path, append ? std::ios::app : std::ios::trunc);
  if (!m_metrics) throw Error{ErrorKind::runtime, "cannot write " + path.string()};
}

void Monitor::set_elapsed(double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) {
    m_t0 = Clock::now() -
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
}

void Monitor::record_scale(bool first_attempt) {
  const auto row = static_cast<int64_t>(m_ring.info.size());
  m_scaler->record_scale(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 1), {1}));
  if (first_attempt) {
    m_scaler->record_scale(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 6), {1}));
  }
}

void Monitor::record_grad_norm(const Tensor& norm) {
  const auto row = static_cast<int64_t>(m_ring.info.size());
  m_backend->copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 3), {1}), norm);
}

void Monitor::record_grad_amax(const Tensor& amax) {
  if (!m_opts.grad_amax) return;
  const auto row = static_cast<int64_t>(m_ring.info.size());
  m_backend->copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 4), {2}), amax);
}

void Monitor::record_step(int64_t step, double lr, const Tensor& loss, int64_t samples,
                          int64_t retries) {
  const auto row = static_cast<int64_t>(m_ring.info.size());
  m_backend->copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 0), {1}), loss);
  m_scaler->record_update(
      *m_opt, m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 2), {1}),
      m_ring.i.view(static_cast<size_t>(row * StepRing::kI + 0), {1}),
      m_ring.i.view(static_cast<size_t>(row * StepRing::kI + 1), {1}),
      m_ring.segments > 0
          ? m_ring.seg.view(static_cast<size_t>(row * m_ring.segments), {m_ring.segments})
          : Tensor{});
  m_totals.samples += samples;
  m_ring.info.push_back({step, lr, seconds_since(m_t0), retries});
}

void Monitor::phase_end(Phase phase) {
  if (!m_opts.profile) return;
  m_backend->synchronize();
  const auto now = Clock::now();
  if (m_phase_counting) {
    m_phase_seconds[phase] += std::chrono::duration<double>(now - m_phase_t).count();
  }
  m_phase_t = now;
}

void Monitor::step_started() {
  m_step_t0 = Clock::now();
  m_samples_before = m_totals.samples;
  m_phase_counting = m_totals.steady;
  m_phase_t = m_step_t0;
}

void Monitor::step_finished(int64_t step) {
  const bool flush_now = static_cast<int64_t>(m_ring.info.size()) >= m_ring.capacity ||
                         step % std::max<int64_t>(1, m_opts.console_every) == 0 ||
                         step == m_opts.max_steps;
  if (flush_now) m_backend->synchronize();
  const double dt = seconds_since(m_step_t0);
  RunTotals& t = m_totals;
  t.train_seconds += dt;
  if (t.steady) {
    t.steady_seconds += dt;
    t.steady_samples += t.samples - m_samples_before;
  }
  m_int_seconds += dt;
  m_int_samples += t.samples - m_samples_before;
  if (flush_now) {
    // Steady state starts after the first logging interval: first-use costs (cuBLASLt
    // heuristics, workspaces, page faults) are behind, and the device has just been drained.
    t.steady = true;
    flush();
  }
}

void Monitor::step_closed() {
  phase_end(kMetrics);
  if (m_opts.profile && m_phase_counting) ++m_phase_steps;
}

Monitor::RingRow Monitor::ring_row(size_t r) const {
  const float* f = m_ring.host_f.data() + r * StepRing::kF;
  const int32_t* i = m_ring.host_i.data() + r * StepRing::kI;
  RingRow row(m_ring.info[r]);
  row.loss = f[0];
  row.scale = f[1];
  row.found_inf = f[2] != 0.0f;
  row.grad_norm = f[3];
  // grad_amax: the device's max |x| at the step's scale, in the units of a micro-batch's
  // mean-loss gradients (divided by the seed, scale / micro-batches: a division by a power
  // of two times an integer, exact for the power-of-two scales of the pytorch rule).
  if (m_opts.grad_amax) {
    const float raw = f[4];
    row.amax_exact = f[5] == 0.0f;
    row.grad_amax = static_cast<double>(raw) * static_cast<double>(m_opts.grad_accum) /
                    static_cast<double>(row.scale);
    if (raw > 0.0f) row.headroom = headroom_log2(max_finite(*m_opts.grad_amax), raw);
  }
  row.first_scale = f[6];
  row.tracker = i[0];
  row.hysteresis = i[1];
  const int64_t segments = m_ring.segments;
  row.flags = segments > 0 ? m_ring.host_seg.data() + r * static_cast<size_t>(segments) : nullptr;
  return row;
}

std::vector<std::string> Monitor::tally(const RingRow& row, bool scaling) {
  RunTotals& t = m_totals;
  const int64_t step = row.info.step;
  t.steps_done = step;
  ++m_int_steps;
  if (row.found_inf) ++t.skipped;
  t.retries += row.info.retries;
  if (std::isfinite(row.grad_norm)) {
    m_int_norm_sum += row.grad_norm;
    ++m_int_norm_n;
  }
  // Clipped: clip_grad_norm_'s coefficient, computed as the device computed it, below 1.
  if (m_opts.grad_clip_norm &&
      nn::clip_coef(row.grad_norm, static_cast<float>(*m_opts.grad_clip_norm)) < 1.0f) {
    ++t.clipped;
  }
  // The last loss, finite or not (summary.json writes null for a non-finite one: a run whose
  // loss went NaN has no final loss to rank it by, not the last finite one).
  t.final_loss = row.loss;
  if (std::isfinite(row.loss)) {
    m_int_loss_sum += row.loss;
    ++m_int_loss_n;
    t.best_loss = std::min(t.best_loss, static_cast<double>(row.loss));
  }
  // A scale below 1 shrinks the gradients: they overflow fp16 even unscaled. Warned once per
  // process (a resumed run that is still below 1 says it again), at the first step that used
  // such a scale.
  if (scaling && row.scale < 1.0f && !m_below_one_warned && m_writer) {
    spdlog::warn(
        "step {}: the loss scale fell below 1 ({:g}): the gradients exceed fp16's range even "
        "unscaled, which is typical of weights trained in bf16; train in bf16 (precision: "
        "bf16) or clip the gradients (training.grad_clip_norm)",
        step, static_cast<double>(row.scale));
  }
  if (scaling && row.scale < 1.0f) m_below_one_warned = true;
  t.min_scale = std::min(t.min_scale, static_cast<double>(row.scale));
  // The failed attempts' scales too (summary.json: every scale a backward used): the first
  // attempt's is the step's largest (a retry runs at the scale update() backed off to).
  t.max_scale =
      std::max({t.max_scale, static_cast<double>(row.scale), static_cast<double>(row.first_scale)});
  std::vector<std::string> overflow_tensors;
  if (row.found_inf && row.flags != nullptr) {
    for (int64_t s = 0; s < m_ring.segments; ++s) {
      if (row.flags[s] == 0) continue;
      ++m_overflow_counts[static_cast<size_t>(s)];
      ++m_int_counts[static_cast<size_t>(s)];
      overflow_tensors.push_back(m_param_names[static_cast<size_t>(s)]);
    }
  }
  return overflow_tensors;
}

void Monitor::check_divergence(const RingRow& row, bool scaling,
                               const std::vector<std::string>& overflow_tensors) {
  const int64_t step = row.info.step;
  const float scale = row.scale;
  const int64_t patience = m_opts.divergence_patience;
  // Divergence rules (see trainer.h), step by step in order.
  const int32_t* streak_flags = row.found_inf ? row.flags : nullptr;
  if (scaling && row.found_inf && scale <= m_scale_floor) {
    m_floor_streak.extend(step, streak_flags);
  } else {
    m_floor_streak.reset();
  }
  if (!std::isfinite(row.loss)) {
    m_loss_streak.extend(step, streak_flags);
  } else {
    m_loss_streak.reset();
  }
  // scaler.on_min_scale: stop: the scale could not back off any further (PyTorch's rule
  // keeps it at the floor), so this overflow would recur; fairseq exits here too.
  if (scaling && m_opts.stop_at_min_scale && row.found_inf && !m_divergence &&
      m_opts.min_scale > 0 && scale <= static_cast<float>(m_opts.min_scale)) {
    m_divergence =
        Divergence{step, m_ring.info.back().step, "overflow_at_min_scale",
                   fmt::format("the gradients overflowed with the loss scale {:g} at its floor "
                               "scaler.min_scale {:g} (scaler.on_min_scale: stop)",
                               static_cast<double>(scale), m_opts.min_scale),
                   overflow_tensors};
  }
  if (patience > 0 && !m_divergence) {
    const int64_t last_step = m_ring.info.back().step;
    if (m_floor_streak.length >= patience) {
      m_divergence = Divergence{
          step, last_step, "overflow_at_scale_floor",
          fmt::format("the gradients overflowed in {} consecutive steps ({}-{}) with the loss "
                      "scale at its floor {:g} ({})",
                      m_floor_streak.length, m_floor_streak.first_step, step,
                      static_cast<double>(m_scale_floor),
                      m_opts.min_scale > 0 ? "scaler.min_scale" : "2^-126: scaler.min_scale is 0"),
          ranked(m_floor_streak.counts)};
    } else if (m_loss_streak.length >= patience) {
      m_divergence =
          Divergence{step, last_step, "nonfinite_loss",
                     fmt::format("the training loss was non-finite in {} consecutive steps ({}-{})",
                                 m_loss_streak.length, m_loss_streak.first_step, step),
                     ranked(m_loss_streak.counts)};
    }
  }
}

void Monitor::write_train_line(const RingRow& row, bool scaling, bool metrics_line, bool json_line,
                               std::vector<std::string> overflow_tensors) {
  const int64_t step = row.info.step;
  run::TrainLine line;
  line.step = step;
  line.loss = row.loss;
  line.scale = row.scale;
  line.found_inf = row.found_inf;
  line.grad_norm = row.grad_norm;
  line.growth_tracker = scaling ? row.tracker : 0;
  if (scaling) line.hysteresis_tracker = row.hysteresis;
  line.lr = row.info.lr;
  line.time_s = row.info.time_s;
  if (row.info.retries > 0) line.retries = row.info.retries;
  if (row.found_inf && row.flags != nullptr) line.overflow_tensors = std::move(overflow_tensors);
  if (row.grad_amax) {
    line.grad_amax = *row.grad_amax;
    line.grad_amax_exact = row.amax_exact;
  }
  const std::string text = run::to_json(line).dump();
  if (m_writer && metrics_line) m_metrics << text << '\n';
  if (m_writer && json_line) write_json_console(text);
  if (m_tb && m_writer && metrics_line) {
    m_tb->scalar(step, "train/loss", row.loss);
    m_tb->scalar(step, "train/lr", row.info.lr);
    if (std::isfinite(row.grad_norm)) m_tb->scalar(step, "train/grad_norm", row.grad_norm);
    m_tb->scalar(step, "amp/scale", row.scale);
    m_tb->scalar(step, "amp/skipped", row.found_inf ? 1.0 : 0.0);
    m_tb->scalar(step, "amp/growth_tracker", line.growth_tracker);
    if (m_opts.retry) m_tb->scalar(step, "amp/retries", static_cast<double>(row.info.retries));
    if (row.grad_amax && std::isfinite(*row.grad_amax)) {
      m_tb->scalar(step, "amp/grad_amax", *row.grad_amax);
    }
    if (row.headroom) m_tb->scalar(step, "amp/headroom_log2", *row.headroom);
  }
}

void Monitor::flush() {
  if (m_ring.info.empty()) return;
  Backend& b = *m_backend;
  b.download(m_ring.host_f.data(), m_ring.f);  // the one wait per logging interval
  b.download(m_ring.host_i.data(), m_ring.i);
  if (m_ring.segments > 0) b.download(m_ring.host_seg.data(), m_ring.seg);
  const bool scaling = m_scaler->is_enabled();
  RunTotals& t = m_totals;
  // A queued line's step (a numerics line has one; one without goes after every train line).
  const auto queued_step = [](const nlohmann::json& line) {
    const auto it = line.find("step");
    return it != line.end() && it->is_number_integer() ? it->get<int64_t>() : INT64_MAX;
  };
  size_t queued = 0;
  for (size_t r = 0; r < m_ring.info.size(); ++r) {
    const RingRow row = ring_row(r);
    const int64_t step = row.info.step;
    std::vector<std::string> overflow_tensors = tally(row, scaling);
    check_divergence(row, scaling, overflow_tensors);
    const bool metrics_line = step % m_opts.metrics_every == 0 || step == m_opts.max_steps;
    // --log-format json: the console line of this step is its metrics line.
    const bool json_line =
        m_opts.json_console != nullptr && r + 1 == m_ring.info.size() && is_console_step(step);
    if (metrics_line || json_line) {
      write_train_line(row, scaling, metrics_line, json_line, std::move(overflow_tensors));
    }
    // The queued lines of this step and earlier ones, right after its train line: the file's
    // order then does not depend on where a flush fell (a run stopped and resumed off a
    // logging boundary writes the lines in the uninterrupted run's order).
    while (queued < m_queued.size() && queued_step(m_queued[queued]) <= step) {
      if (m_writer) m_metrics << m_queued[queued].dump() << '\n';
      ++queued;
    }
  }
  if (m_writer) {
    for (; queued < m_queued.size(); ++queued) m_metrics << m_queued[queued].dump() << '\n';
    m_metrics.flush();
    check_metrics_stream();
  }
  m_queued.clear();
  const auto& last = m_ring.info.back();
  const double rate = t.train_seconds > 0 ? t.samples / t.train_seconds : 0.0;
  // The console line at logging.every_steps' multiples and at the last step only: a read-back
  // before an evaluation or a checkpoint keeps the interval open, so the cadence does not drift.
  const bool console = is_console_step(last.step);
  if (m_writer && console && m_opts.json_console == nullptr) {
    const size_t steps = m_ring.info.size();
    log_console_line(last.step, static_cast<double>(m_ring.host_f[(steps - 1) * StepRing::kF + 1]));
  }
  if (console) {
    m_int_loss_sum = m_int_norm_sum = 0;
    m_int_loss_n = m_int_norm_n = m_int_steps = 0;
    m_int_seconds = 0;
    m_int_samples = 0;
    std::fill(m_int_counts.begin(), m_int_counts.end(), 0);
  }
  t.final_scale = scaling ? m_scaler->get_scale() : 1.0;
  // The scale the last update set counts too: max_scale is the largest scale the run held.
  t.max_scale = std::max(t.max_scale, t.final_scale);
  t.min_scale = std::min(t.min_scale, t.final_scale);
  if (m_tb && m_writer) {
    m_tb->scalar(last.step, "perf/samples_per_s", rate);
    m_tb->flush();
  }
  m_ring.info.clear();
}

bool Monitor::is_console_step(int64_t step) const {
  return step % std::max<int64_t>(1, m_opts.console_every) == 0 || step == m_opts.max_steps;
}

void Monitor::write_json_console(const std::string& line) const {
  std::fputs(line.c_str(), m_opts.json_console);
  std::fputc('\n', m_opts.json_console);
  std::fflush(m_opts.json_console);  // a reader of the pipe sees each line as its step ends
}

void Monitor::log_console_line(int64_t step, double scale) const {
  const RunTotals& t = m_totals;
  // Every number in run/numbers.h's one short format. loss and grad_norm: means over the
  // interval's steps, of their finite values ("-" when none was finite); scale: the last step's,
  // as its metrics line records it (the one its backward used); skipped: since the run began;
  // ms/step and the rate: the interval's steps alone.
  const auto mean = [](double sum, int64_t n) {
    return n > 0 ? std::optional<double>(sum / static_cast<double>(n)) : std::nullopt;
  };
  const int width = static_cast<int>(std::to_string(m_opts.max_steps).size());
  std::string text = fmt::format("step {:>{}}/{}", step, width, m_opts.max_steps);
  if (m_opts.epoch_samples > 0) {
    text += " ep " + run::short_number(static_cast<double>(t.samples) / m_opts.epoch_samples);
  }
  text += " loss " + run::short_mean(mean(m_int_loss_sum, m_int_loss_n));
  text += " gnorm " + run::short_mean(mean(m_int_norm_sum, m_int_norm_n));
  if (m_scaler->is_enabled()) text += " scale " + run::short_scale(scale);
  text += fmt::format(" skip {}", t.skipped);
  // retries: failed attempts run again since the run began (scaler.on_overflow: retry).
  if (m_opts.retry) text += fmt::format(" retries {}", t.retries);
  text += " lr " + run::short_number(m_ring.info.back().lr);
  if (m_int_steps > 0 && m_int_seconds > 0) {
    const double per_second = static_cast<double>(m_int_samples) / m_int_seconds;
    text += " " + run::short_number(m_int_seconds * 1e3 / static_cast<double>(m_int_steps)) +
            " ms/step";
    text +=
        m_opts.tokens_per_sample > 0
            ? " " + run::short_number(per_second * static_cast<double>(m_opts.tokens_per_sample)) +
                  " tokens/s"
            : " " + run::short_number(per_second) + " samples/s";
  }
  const double eta = t.steps_done > 0 ? (t.train_seconds / static_cast<double>(t.steps_done)) *
                                            static_cast<double>(m_opts.max_steps - t.steps_done)
                                      : 0.0;
  text += " ETA " + format_eta(eta);
  spdlog::info("{}", text);
  // The tensors that overflowed in the interval, most first, on a line of their own (the names
  // are long: a GPT's run to 40 characters).
  if (const std::vector<std::string> names = ranked(m_int_counts); !names.empty()) {
    spdlog::info("  overflow in {}", join_names(names, 2));
  }
}

void Monitor::queue_line(nlohmann::json line) {
  m_queued.push_back(std::move(line));
}

void Monitor::check_metrics_stream() {
  if (!m_metrics) {
    throw Error{ErrorKind::runtime,
                "cannot write " + m_metrics_path.string() + " (disk full or I/O error)"};
  }
}

nlohmann::json Monitor::record_eval(int64_t step, double loss, std::optional<double> accuracy,
                                    double seconds, const std::vector<SetResult>& more) {
  RunTotals& t = m_totals;
  if (accuracy) t.best_eval_accuracy = std::max(t.best_eval_accuracy.value_or(0.0), *accuracy);
  if (std::isfinite(loss)) t.best_eval_loss = std::min(t.best_eval_loss.value_or(loss), loss);
  run::EvalLine line;
  line.step = step;
  line.loss = loss;
  line.accuracy = accuracy;
  if (m_opts.tokens_per_sample > 0) line.perplexity = std::exp(loss);
  line.time_s = seconds_since(m_t0);
  // Every set's values in order (the first set's is index 0), for the trackers and eval_sets.
  std::vector<SetResult> sets{{m_opts.eval_set_name, loss, accuracy}};
  sets.insert(sets.end(), more.begin(), more.end());
  const auto update = [&sets, step](MetricTracker& m) {
    const SetResult& r = sets[std::min(m.set, sets.size() - 1)];
    return m.update(step, r.loss, r.accuracy);
  };
  m_last_eval_best = update(m_keep_best);
  update(m_early_stop);
  nlohmann::json j = run::to_json(line);
  if (!m_opts.eval_set_name.empty()) {
    j["set"] = m_opts.eval_set_name;
    if (t.eval_sets.is_null()) t.eval_sets = nlohmann::json::object();
  }
  std::string console;
  for (size_t i = 0; i < sets.size(); ++i) {
    const SetResult& r = sets[i];
    if (i > 0) {
      j["eval." + r.name + ".loss"] = run::finite_or_null(r.loss);
      if (r.accuracy) j["eval." + r.name + ".accuracy"] = *r.accuracy;
      if (m_opts.tokens_per_sample > 0) {
        j["eval." + r.name + ".perplexity"] = run::finite_or_null(std::exp(r.loss));
      }
      console += " | " + r.name + " loss " + run::short_number(r.loss) +
                 (r.accuracy ? " accuracy " + run::short_number(*r.accuracy) : std::string());
    }
    if (!t.eval_sets.is_null()) {
      nlohmann::json& s = t.eval_sets[r.name];
      s["loss"] = run::finite_or_null(r.loss);
      if (r.accuracy) s["accuracy"] = *r.accuracy;
      if (std::isfinite(r.loss) && (!s.contains("best_loss") || !s["best_loss"].is_number() ||
                                    r.loss < s["best_loss"].get<double>())) {
        s["best_loss"] = r.loss;
      }
      if (!s.contains("best_loss")) s["best_loss"] = nullptr;
      if (r.accuracy &&
          (!s.contains("best_accuracy") || *r.accuracy > s["best_accuracy"].get<double>())) {
        s["best_accuracy"] = *r.accuracy;
      }
    }
  }
  if (m_writer) {
    m_metrics << j.dump() << '\n';
    m_metrics.flush();
    if (m_opts.json_console != nullptr) {
      write_json_console(j.dump());
    } else {
      const int width = static_cast<int>(std::to_string(m_opts.max_steps).size());
      spdlog::info(
          "eval {:>{}}/{}{} loss {}{}{}{}", step, width, m_opts.max_steps,
          m_opts.eval_set_name.empty() ? std::string() : " " + m_opts.eval_set_name,
          run::short_number(loss), accuracy ? " accuracy " + run::short_number(*accuracy) : "",
          line.perplexity ? " perplexity " + run::short_number(*line.perplexity) : std::string(),
          console);
    }
    if (m_tb) {
      m_tb->scalar(step, "eval/loss", loss);
      if (accuracy) m_tb->scalar(step, "eval/accuracy", *accuracy);
      if (line.perplexity) m_tb->scalar(step, "eval/perplexity", *line.perplexity);
      for (size_t i = 1; i < sets.size(); ++i) {
        m_tb->scalar(step, "eval." + sets[i].name + "/loss", sets[i].loss);
        if (sets[i].accuracy)
          m_tb->scalar(step, "eval." + sets[i].name + "/accuracy", *sets[i].accuracy);
      }
      m_tb->flush();
    }
  }
  t.eval_seconds += seconds;
  return j;
}

std::vector<std::string> Monitor::ranked(const std::vector<int64_t>& counts) const {
  std::vector<size_t> order;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return counts[a] > counts[b]; });
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(m_param_names[i]);
  return names;
}

std::vector<std::string> Monitor::nonfinite_tensors(const Tensor& arena) const {
  std::vector<float> host(arena.numel());
  m_backend->download(host.data(), arena);
  std::vector<std::string> names;
  for (const FlatLayout::Entry& e : m_layout.entries()) {
    const float* p = host.data() + e.offset;
    if (!std::all_of(p, p + e.numel, [](float v) { return std::isfinite(v); })) {
      names.push_back(e.name);
    }
  }
  return names;
}

nlohmann::json Monitor::counts_json(const std::vector<int64_t>& counts) const {
  return run::counts_json(m_param_names, counts);
}

void Monitor::log_most_overflowing() const {
  const std::vector<std::string> names = ranked(m_overflow_counts);
  if (names.empty() || !m_writer) return;
  std::string text;
  for (size_t i = 0; i < names.size() && i < 5; ++i) {
    const auto at = std::find(m_param_names.begin(), m_param_names.end(), names[i]);
    text += fmt::format("{}{} ({} steps)", i ? ", " : "", names[i],
                        m_overflow_counts[static_cast<size_t>(at - m_param_names.begin())]);
  }
  if (names.size() > 5) text += fmt::format(" and {} more", names.size() - 5);
  spdlog::info("most overflowing: {}", text);
}

nlohmann::json Monitor::phase_json() const {
  if (!m_opts.profile || m_phase_steps == 0) return nullptr;
  static constexpr const char* kNames[kPhases] = {"data",      "forward", "backward", "unscale",
                                                  "optimizer", "update",  "metrics"};
  nlohmann::json j = nlohmann::json::object();
  double total = 0;
  for (int p = 0; p < kPhases; ++p) {
    const double ms = m_phase_seconds[p] * 1e3 / static_cast<double>(m_phase_steps);
    j[kNames[p]] = ms;
    total += ms;
  }
  j["total"] = total;
  j["steps"] = m_phase_steps;
  return j;
}

void Monitor::log_phases() const {
  if (!m_writer || !m_opts.profile || m_phase_steps == 0) return;
  double ms[kPhases];
  double total = 0;
  for (int p = 0; p < kPhases; ++p) {
    ms[p] = m_phase_seconds[p] * 1e3 / static_cast<double>(m_phase_steps);
    total += ms[p];
  }
  spdlog::info(
      "step phases (ms, mean of {} steady steps): data {:.3f}, forward {:.3f}, backward {:.3f}, "
      "unscale/check {:.3f}, optimizer {:.3f}, scaler update {:.3f}, metrics {:.3f}; "
      "total {:.3f}",
      m_phase_steps, ms[kData], ms[kForward], ms[kBackward], ms[kUnscale], ms[kOptimizer],
      ms[kUpdate], ms[kMetrics], total);
}

}  // namespace ampctl::train
