#include "ampctl/run/layout.h"

#include "ampctl/run/metrics_line.h"

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
