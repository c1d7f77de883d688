// Which keys `ampctl resume --set KEY=VALUE` may change, and why the others may not: one table
// that the resume command (its refusals), the divergence hint (what it suggests) and the docs use.
//
// A resumed run continues the checkpointed one: the model's tensors, the data cursor, the
// optimizer's state and the scaler's state are loaded as they were saved. A key may change when
// the state it governs is not in the checkpoint or is recomputed from the key at every step:
//   training.*, logging.*, checkpoint.*, debug.*, distributed.*, device   (how the run proceeds)
//   optimizer.lr, scheduler.*   (the schedule is a function of the step and these keys, applied
//                                at every step: it continues from the checkpoint's step with the
//                                new values)
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ampctl/config/run_config.h"

namespace ampctl::config {

// The keys and sections resume accepts, in words, for messages and hints.
std::string resumable_keys_text();

// nullopt when `key` (a dotted key of --set, or a section) may be overridden on resume; else why
// not, in words that are true for that key.
std::optional<std::string> resume_refusal(std::string_view key);

// A change of the resolved configuration that resume does not take: the key, its value before
// and after (as JSON text; "absent" for a key one of them does not have) and why.
struct RefusedChange {
  std::string key;
  std::string before;
  std::string after;
  std::string why;
};

// The first key (in alphabetical order) whose resolved value differs between `before`
// (the checkpoint's configuration) and `after` (the same with resume's --set overrides) and that
// resume_refusal refuses; nullopt when every change is one resume takes. What counts is the
// resolved value, whatever spelled it: `--set scaler.init_scale=5` and `--set 'scaler={init_scale:
// 5.0}'` are the same change, and `--set model.hidden=[64, 64]` on a run with those widths none.
std::optional<RefusedChange> refused_change(const RunConfig& before, const RunConfig& after);

}  // namespace ampctl::config
