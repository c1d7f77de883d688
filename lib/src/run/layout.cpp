#include "ampctl/run/layout.h"

#include <sys/stat.h>

#include <algorithm>

#include "ampctl/core/input_file.h"
#include "ampctl/core/run_lock.h"
#include "ampctl/run/metrics_line.h"
#include "ampctl/run/summary.h"

namespace ampctl::run {
namespace fs = std::filesystem;

bool holds_run(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kMetricsFile, ec) && fs::exists(dir / "config.yaml", ec);
}

bool holds_sweep(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kSweepFile, ec);
}

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "config.yaml",    kMetricsFile,        "metrics.jsonl.tmp",
      kSummaryFile,     "vocab.json",        "input.json",
      "tokenizer.json", "checkpoints",       kRunLockFile,
      kSweepFile,       "sweep.csv",         "stdout.log",
      "stderr.log",     ".ampctl-sweep-run", ".ampctl-sweep-config.yaml"};
  return names;
}

bool is_run_file_name(const std::string& name) {
  const std::vector<std::string>& names = run_file_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  // TensorBoard's event files (events.out.tfevents.<seconds>.<host>, one per start or resume).
  if (name.rfind("events.out.tfevents.", 0) == 0) return true;
  // The atomic writer's temporary files (.NAME.tmp-PID-HEX) and the run directory's probe.
  if (name.size() > 1 && name[0] == '.' &&
      (name.find(".tmp-") != std::string::npos || name.rfind(".ampctl-write-test-", 0) == 0)) {
    return true;
  }
  // The sweep's per-run locks, OUT/.<run>.lock.
  return name.size() > 5 && name[0] == '.' && name.compare(name.size() - 5, 5, ".lock") == 0;
}

bool is_run_directory(const fs::path& dir) {
  for (const char* name : {kMetricsFile, kSummaryFile, kSweepFile, ".ampctl-sweep-run",
                           kRunLockFile, "checkpoints/latest"}) {
    struct stat st {};
    if (::lstat((dir / name).c_str(), &st) == 0) return true;
  }
  return false;
}

std::string non_regular_run_file(const fs::path& dir) {
  for (const std::string& name : run_file_names()) {
    const fs::path p = dir / name;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (name == "checkpoints") {
      if (::stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
        return p.string() + " is not a directory";
      }
      // Its files too (latest, the checkpoints): resume reads them and writes latest.
      std::error_code ec;
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string kind = non_regular_kind(it->path());
        if (!kind.empty() && kind != "a directory") return it->path().string() + " is " + kind;
      }
      continue;
    }
    const std::string kind = non_regular_kind(p);
    if (!kind.empty()) return p.string() + " is " + kind;
  }
  return {};
}

std::string inside_checkpoints_folder(const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(dir, ec);
  if (ec) p = fs::absolute(dir, ec).lexically_normal();
  for (; !p.empty(); p = p.parent_path()) {
    if (p.filename() == "checkpoints" && holds_run(p.parent_path())) {
      return "inside " + p.string() + ", the checkpoint folder of the run in " +
             p.parent_path().string();
    }
    if (p == p.parent_path()) break;
  }
  return {};
}

}  // namespace ampctl::run
