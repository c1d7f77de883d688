// RunDir: the directory a run writes (config.yaml, metrics.jsonl, summary.json, checkpoints/),
// held for the run's life.
//
// Opening one makes the directory (and its missing parents) and proves it writable with a probe
// file that is removed again, before any data is loaded or anything else is written: an
// unusable run directory (a path through a regular file, a file of that name, no permission, a
// read-only or pseudo file system) is refused up front, naming the path. It remembers the
// directories it created, so a run that fails before writing anything can remove them again
// (remove_if_unused); nothing else is ever removed.
//
// The run's writer (rank 0: the only process that writes it, dist/communicator.h) also claims
// the directory through claim(), after its data has loaded and before it writes anything: the
// run directory's lock (core/run_lock.h) and, under it, the "holds no run yet" test, in one
// step, held for the object's life. One process at a time writes a run directory; a second
// writer is refused (Error{usage}, exit 2) naming the holder, and one that finds a run there
// that finished while it loaded its data is refused too. Other ranks neither lock nor write.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/run/metrics_line.h"
#include "ampctl/run/summary.h"

namespace ampctl {
class RunLock;
}
namespace ampctl::config {
struct RunConfig;
}

namespace ampctl::train {

class RunDir {
 public:
  // Throws Error{usage} naming the path when it cannot be created or written.
  explicit RunDir(std::filesystem::path path);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path config_path() const { return m_path / "config.yaml"; }
  std::filesystem::path metrics_path() const { return m_path / run::kMetricsFile; }
  std::filesystem::path summary_path() const { return m_path / run::kSummaryFile; }

  // Removes the directories this object created, innermost first, if they are still empty
  // (but for the lock file, removed with them).
  void remove_if_unused() const;
  // What a claim expects of the directory: no run in it yet (train, a branch), or the run that
  // continues in it (resume in place).
  enum class Claim { new_run, continued_run };
  // Claims the directory for this process in one step (after the data has loaded, before
  // anything is written): takes the lock (see above; Error{usage} naming the holder when another
  // process has it) and, under it, checks that a new run's directory still holds no run and
  // that none of the run's files (run/layout.h's list) is there as anything but a regular file;
  // Error{usage} naming the directory or the file otherwise, with the lock released again.
  void claim(Claim kind);

  // config.yaml := `yaml` (Error{runtime} when it cannot be written).
  void write_config(const std::string& yaml) const;
  // vocab.json: a language model's vocabulary on text data (data/vocab.h's JSON array).
  std::filesystem::path vocab_path() const { return m_path / "vocab.json"; }
  void write_vocab(const std::string& json) const;
  // tokenizer.json: the tokenizer text was read through (data.train.tokenizer), byte for byte
  // (from GPT-2's two files: the equivalent tokenizer.json); `ampctl sample` reads it.
  std::filesystem::path tokenizer_path() const { return m_path / "tokenizer.json"; }
  void write_tokenizer(const std::string& json) const;
  // input.json: the data.normalize statistics (checkpoint.h, CheckpointData::input's JSON).
  std::filesystem::path input_stats_path() const { return m_path / "input.json"; }
  void write_input_stats(const std::string& json) const;
  // Drops the lines of metrics.jsonl with a step > last_step and any torn line (a run that
  // died after its checkpoint, or resume --rewind), replacing the file atomically. Returns the
  // number of complete lines dropped.
  int64_t truncate_metrics(int64_t last_step) const;
  // A branch (resume --run-dir): `source` run directory's history up to `step` becomes this
  // one's: metrics.jsonl's lines up to `step`, its TensorBoard event files (the resumed writer's
  // purge step hides their later events, as in the source itself) and the checkpoint
  // `checkpoint_file` (byte for byte, as checkpoints/latest). `source` is only read;
  // "" (a checkpoint outside a run): only the checkpoint. On failure what it created is removed.
  void import_history(const std::filesystem::path& source,
                      const std::filesystem::path& checkpoint_file, int64_t step) const;
  // Removes summary.json, if any (a resumed run writes its own when it ends).
  void remove_summary() const;
  // Removes these checkpoint files (resume --rewind: those after its checkpoint).
  void remove_checkpoints(const std::vector<std::filesystem::path>& files) const;

 private:
  std::filesystem::path m_path;
  std::vector<std::filesystem::path> m_created;  // outermost first
  std::unique_ptr<RunLock> m_lock;
};

// The run directory for a config: `requested` when given (it must not hold a previous run), else
// runs/<name>, or runs/<name>-2, -3, ... when that already holds one or another process has it
// locked.
std::filesystem::path choose_run_dir(const config::RunConfig& config,
                                     const std::filesystem::path& requested);

}  // namespace ampctl::train
