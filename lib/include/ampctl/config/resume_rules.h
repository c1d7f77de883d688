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

namespace ampctl::config {

// The keys and sections resume accepts, in words, for messages and hints.
std::string resumable_keys_text();

// nullopt when `key` (a dotted key of --set, or a section) may be overridden on resume; else why
// not, in words that are true for that key.
std::optional<std::string> resume_refusal(std::string_view key);

}  // namespace ampctl::config
