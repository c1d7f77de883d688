// `ampctl replay`: a finished run's per-step grad_amax (metrics.jsonl) replayed under other scaler
// settings, step by step, with the scale rules the trainer runs (math/amp_math.h:
// update_scale_policy), so a grid of scaler settings is previewed without retraining.
//
// The model of a step (docs/reference.md, "Replay"): an attempt at scale s overflows when
// grad_amax x s / grad_accum_steps exceeds the half type's largest finite value, or when the
// recorded run itself overflowed at a scale <= s (its grad_amax is then only a lower bound). Each
// attempt is one update of the rule; with scaler.on_overflow: retry an overflowing attempt runs
// again at the backed-off scale (the same grad_amax) up to max_retries times, then the step is
// skipped. The recorded run's parameters follow its own skips, not the replayed ones: a replay
// is a prediction, exact until the first step where the two runs' skips differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/config/run_config.h"

namespace ampctl::replay {

// `ampctl replay` replays at most this many settings (grid points) in one call: a row costs
// milliseconds, but a product of --grid flags can explode; past it the call is refused before
// anything is replayed.
inline constexpr std::size_t kMaxPoints = 100000;

// One train line of the recorded run.
struct RecordedStep {
  int64_t step = 0;
  double scale = 1.0;          // the scale the kept attempt used
  bool found_inf = false;      // the kept attempt overflowed
  std::optional<double> amax;  // grad_amax (null: unknown)
  bool amax_exact = true;      // grad_amax_exact
};

struct Recording {
  std::filesystem::path dir;
  std::vector<RecordedStep> steps;     // ascending step numbers one per step
  double max_finite = kHalfMaxFinite;  // the half type's largest finite value
  int64_t accum = 1;                   // micro-batches per rank: grad_amax's seed is scale / accum
  std::string precision;
  config::RunConfig config;  // RUN's config.yaml
  // Its text, read once: every setting is resolved from it (a resume that rewrites config.yaml
  // while replay runs changes no row).
  std::string config_text;
  // config_text parsed once (load_recording fills it; without it each row parses the text).
  std::shared_ptr<const config::ConfigTemplate> config_template;
};

// Reads DIR/config.yaml, then DIR/metrics.jsonl, each once. Throws Error{input} naming the file
// for a missing or unreadable one, a run without grad_amax (hint: logging.grad_amax: true), and
// what is ambiguous: a train line with a key written twice, two train lines for one step that
// disagree on what replay reads (scale, found_inf / skipped, grad_amax, grad_amax_exact; equal
// repeats are one line), a missing step.
Recording load_recording(const std::filesystem::path& dir);

// One replayed step: the scale of the attempt kept (the last one), whether it overflowed (the
// step is skipped) and the failed attempts before it.
struct ReplayedStep {
  int64_t step = 0;
  double scale = 1.0;
  bool skipped = false;
  int64_t retries = 0;
};

// One scaler setting's outcome (the keys of `--json`, and the trajectory `--html` draws).
struct Outcome {
  std::vector<std::pair<std::string, std::string>> overrides;  // KEY, VALUE (YAML text)
  int64_t skipped = 0;
  std::optional<int64_t> first_skip;
  int64_t retries = 0;
  double min_scale = 0.0, max_scale = 0.0, final_scale = 0.0;   // every scale an attempt used,
                                                                // and the one after the last update
  std::optional<double> mean_headroom_log2, min_headroom_log2;  // over steps with grad_amax > 0
  int64_t uncertain_steps = 0;
  // The first step whose kept scale or skip differs from the recording's (none: the replay
  // follows the recording). Under RUN's own settings it departs only where config.yaml is not
  // what the run was recorded under (a resume that changed scaler.* keys): that row is then not
  // "(as recorded)".
  std::optional<int64_t> departs_at;
  std::string label;  // a name for the setting (a sweep's named run), or "": the overrides name it
  std::vector<ReplayedStep> steps;  // one per recorded step, in order (none without keep_steps)
};

// Replays the recording under RUN's config.yaml (Recording::config_text) with `overrides`
// ("KEY=VALUE", scaler.* keys only, each with who said it: --set or --grid) applied through the
// configuration's own validation: a bad key or value throws ConfigError{config} naming it as
// its flag said it; a key outside scaler.* throws Error{config} naming it. `keep_steps` false
// leaves Outcome::steps empty (a large grid keeps its rows only).
Outcome replay(const Recording& rec, const std::vector<config::SaidOverride>& overrides,
               bool keep_steps = true);
// The same with every override said by --set.
Outcome replay(const Recording& rec, const std::vector<std::string>& overrides);

// The same under a resolved configuration (`ampctl sweep --replay-from`: a sweep run's), whose
// scaler section is replayed; `overrides` are only recorded in the outcome (the setting's name).
// The caller vouches that `cfg` differs from RUN's configuration in scaler.* keys only
// (gradient_keys_differing below).
Outcome replay(const Recording& rec, const config::RunConfig& cfg,
               std::vector<std::pair<std::string, std::string>> overrides, bool keep_steps = true);

// The first configuration key (a dotted name, e.g. "optimizer.lr") in which `cfg` differs from
// RUN's config.yaml in a way that changes the recorded gradients, or "" when none does. Keys that
// do not change them are ignored: scaler.*, name, device, logging.*, checkpoint.*, the evaluation
// cadence, divergence_patience, distributed.* and training.max_steps (a replay covers RUN's
// steps), and `seed` (replay is seed-free: it predicts from RUN's recording whatever the seed).
std::string gradient_key_differing(const Recording& rec, const config::RunConfig& cfg);

// `ampctl replay`'s table (header and one row per outcome, no trailing note) and its `--json`
// list (docs/reference.md, "Replay"); `ampctl sweep --replay-from` prints the same.
std::string table_text(const std::vector<Outcome>& outcomes);
// The setting column: the label, else "KEY=VALUE ..." without "scaler.", else "(as recorded)"
// (or "(config.yaml, departs at step K)" when RUN's own settings do not give back the recording).
std::string setting_text(const Outcome& outcome);
nlohmann::ordered_json to_json(const std::vector<Outcome>& outcomes);
// The lines before and after the table.
std::string table_intro(const Recording& rec);
extern const char* const kTableNote;

}  // namespace ampctl::replay
