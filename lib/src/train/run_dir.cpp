#include "ampctl/train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/run_lock.h"
#include "ampctl/run/layout.h"

namespace ampctl::train {
namespace fs = std::filesystem;
namespace {

Error unusable_run_dir(const fs::path& dir, const std::string& why) {
  return Error{ErrorKind::usage, "run directory " + dir.string() + ": " + why,
               "give a writable directory with --run-dir DIR (for resume: the run continues in "
               "that new directory, and its own is only read)"};
}

bool holds_run_files(const fs::path& d) {
  std::error_code ec;
  return fs::exists(d / run::kMetricsFile, ec) || fs::exists(d / run::kSummaryFile, ec) ||
         fs::exists(d / "checkpoints", ec);
}

}  // namespace

RunDir::~RunDir() = default;

RunDir::RunDir(fs::path path) : m_path(std::move(path)) {
  const fs::path& dir = m_path;
  std::error_code ec;
  if (run::holds_sweep(dir)) {
    throw unusable_run_dir(dir, std::string("holds a sweep (") + run::kSweepFile +
                                    "); its runs are in folders below it");
  }
  if (const std::string why = run::inside_checkpoints_folder(dir); !why.empty()) {
    throw unusable_run_dir(dir, why + " (it holds that run's checkpoints only)");
  }
  std::vector<fs::path> missing;
  fs::path p = dir;
  while (!p.empty()) {
    const fs::file_status st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found) {
      missing.push_back(p);
      const fs::path parent = p.parent_path();
      if (parent == p) break;
      p = parent;
      continue;
    }
    if (ec) throw unusable_run_dir(dir, "cannot inspect " + p.string() + ": " + ec.message());
    if (st.type() != fs::file_type::directory) {
      throw unusable_run_dir(
          dir, p == dir ? "exists and is not a directory" : p.string() + " is not a directory");
    }
    break;
  }
  std::reverse(missing.begin(), missing.end());
  for (const fs::path& m : missing) {
    if (!fs::create_directory(m, ec) && ec) {
      for (auto it = m_created.rbegin(); it != m_created.rend(); ++it) fs::remove(*it, ec);
      throw unusable_run_dir(dir, "cannot create " + m.string() + ": " + ec.message());
    }
    m_created.push_back(m);
  }
  const fs::path probe = dir / (".ampctl-write-test-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    for (auto it = m_created.rbegin(); it != m_created.rend(); ++it) fs::remove(*it, ec);
    throw unusable_run_dir(dir, std::string("is not writable: ") + std::strerror(err));
  }
  ::close(fd);
  fs::remove(probe, ec);
}

void RunDir::remove_if_unused() const {
  std::error_code ec;
  // The lock file is this run's own when it made the directory; it goes first so the directory
  // can be empty (the lock itself stays held on the unlinked file until the process ends).
  if (m_lock && !m_created.empty()) fs::remove(m_path / kRunLockFile, ec);
  for (auto it = m_created.rbegin(); it != m_created.rend(); ++it) {
    if (fs::is_empty(*it, ec)) fs::remove(*it, ec);
  }
}

void RunDir::claim(Claim kind) {
  if (!m_lock) m_lock = std::make_unique<RunLock>(m_path);
  // Under the lock, in the same step: what was checked before the data loaded may have changed
  // since (another train into the same new directory that finished meanwhile). The lock is
  // dropped again on a refusal, so remove_if_unused leaves the other run's lock file alone.
  std::string refusal;
  if (kind == Claim::new_run && holds_run_files(m_path)) {
    refusal = "already holds a run (written by another process while this one loaded its data)";
  } else if (const std::string bad = run::non_regular_run_file(m_path); !bad.empty()) {
    refusal = bad + ", not a regular file: a run never opens it";
  }
  if (refusal.empty()) return;
  m_lock.reset();
  throw Error{ErrorKind::usage, "run directory " + m_path.string() + " " + refusal,
              kind == Claim::new_run
                  ? "choose another --run-dir; the run there is left as it is"
                  : "move that file away: the run writes a regular file of that name"};
}

// Each through a temporary file renamed over it (atomic_file.h): a full disk or a kill leaves the
// previous file, never a truncated one.
void RunDir::write_config(const std::string& yaml) const {
  checkpoint::write_file_atomic(config_path(), yaml);
}

void RunDir::write_vocab(const std::string& json) const {
  checkpoint::write_file_atomic(vocab_path(), json + '\n');
}

void RunDir::write_tokenizer(const std::string& json) const {
  std::ofstream out(tokenizer_path(), std::ios::binary);
  out << json;
  if (!out) throw Error{ErrorKind::runtime, "cannot write " + tokenizer_path().string()};
}

void RunDir::write_input_stats(const std::string& json) const {
  checkpoint::write_file_atomic(input_stats_path(), json + '\n');
}

namespace {

// The lines of the metrics file `from` with a step <= last_step, each ending in '\n'; a line that
// does not parse (the torn end of a killed run's last write) is left out. `dropped` counts the
// complete lines left out for their step. A missing file has no lines; a file that cannot be
// read to its end (a read error, a line over the cap, no memory) is an error, so the file is
// never rewritten from part of it.
std::string metrics_up_to(const fs::path& from, int64_t last_step, int64_t& dropped) {
  std::string kept;
  std::error_code ec;
  if (fs::symlink_status(from, ec).type() == fs::file_type::not_found) return kept;
  LineReader in(from, kMaxMetricsLineBytes, "metrics file");
  std::string line;
  while (in.next(line)) {
    const std::optional<run::MetricsRecord> r = run::read_metrics_line(line);
    if (!r || !r->step || !r->step_is_integer) continue;
    if (*r->step > last_step) {
      ++dropped;
      continue;
    }
    try {
      kept += line;
      kept += '\n';
    } catch (const std::bad_alloc&) {
      throw Error{ErrorKind::runtime,
                  "out of memory: cannot hold the first " + std::to_string(in.line_number()) +
                      " lines of " + from.string() + " (" + format_bytes(kept.size()) +
                      ") to rewrite it; it is left as it was",
                  "free memory or raise the process's memory limit (ulimit -v)"};
    }
  }
  return kept;
}

// `path` := `text` through the temporary file PATH.tmp (metrics.jsonl.tmp: a name the sweep's
// cleanup and the owned-output rules know) renamed over it.
void replace_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      throw Error{ErrorKind::runtime, "cannot write " + tmp.string()};
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(tmp, rm);
    throw Error{ErrorKind::runtime, "cannot replace " + path.string() + ": " + ec.message()};
  }
}

}  // namespace

int64_t RunDir::truncate_metrics(int64_t last_step) const {
  int64_t dropped = 0;
  replace_file(metrics_path(), metrics_up_to(metrics_path(), last_step, dropped));
  return dropped;
}

void RunDir::import_history(const fs::path& source, const fs::path& checkpoint_file,
                            int64_t step) const {
  // What this call creates, removed again when it fails (a full disk): the branch is then as it
  // was, a directory that holds no run, and the same command can be run again.
  std::vector<fs::path> created;
  std::error_code ec;
  const auto add = [&](const fs::path& p) {
    if (!fs::exists(p, ec)) created.push_back(p);
  };
  try {
    // The checkpoint first: a branch killed while copying can still be resumed.
    add(m_path / "checkpoints");
    add(m_path / "checkpoints" / checkpoint::checkpoint_file_name(step));
    add(m_path / "checkpoints" / "latest");
    checkpoint::adopt_checkpoint(m_path, checkpoint_file, step);
    // (input.json and vocab.json are written from the checkpoint by resume itself.)
    if (!source.empty()) {
      if (fs::exists(source / run::kMetricsFile, ec)) {
        int64_t dropped = 0;
        add(metrics_path());
        replace_file(metrics_path(), metrics_up_to(source / run::kMetricsFile, step, dropped));
      }
      for (fs::directory_iterator it(source, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.starts_with("events.out.tfevents.")) continue;
        std::error_code copy;
        add(m_path / name);
        fs::copy_file(it->path(), m_path / name, fs::copy_options::skip_existing, copy);
        if (copy) {
          throw Error{ErrorKind::runtime, "cannot copy " + it->path().string() + " into " +
                                              m_path.string() + ": " + copy.message()};
        }
      }
      if (ec) {
        throw Error{ErrorKind::runtime, "cannot list " + source.string() + ": " + ec.message()};
      }
    }
  } catch (...) {
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);
    throw;
  }
}

void RunDir::remove_summary() const {
  std::error_code ec;
  if (!fs::remove(summary_path(), ec) && ec) {
    throw Error{ErrorKind::runtime,
                "cannot remove " + summary_path().string() + ": " + ec.message()};
  }
}

void RunDir::remove_checkpoints(const std::vector<fs::path>& files) const {
  for (const fs::path& file : files) {
    std::error_code ec;
    if (!fs::remove(file, ec) && ec) {
      throw Error{ErrorKind::runtime, "cannot remove " + file.string() + ": " + ec.message()};
    }
  }
}

fs::path choose_run_dir(const config::RunConfig& config, const fs::path& requested) {
  const auto holds_run = holds_run_files;
  if (!requested.empty()) {
    if (holds_run(requested)) {
      throw Error{ErrorKind::usage, "run directory " + requested.string() + " already holds a run",
                  "choose another --run-dir, or continue it with 'ampctl resume --checkpoint " +
                      requested.string() + "'"};
    }
    return requested;
  }
  // A default directory that another process is writing (locked, before its first metrics line)
  // is taken too: the next name is free for this run.
  const auto taken = [&](const fs::path& d) { return holds_run(d) || run_lock_held(d); };
  const fs::path base = fs::path("runs") / config.name;
  if (!taken(base)) return base;
  for (int i = 2;; ++i) {
    fs::path p = fs::path("runs") / (config.name + "-" + std::to_string(i));
    if (!taken(p)) return p;
  }
}

}  // namespace ampctl::train
