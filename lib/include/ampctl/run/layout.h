// Where runs are, as the commands that write them see it: a folder holding a run, and the one
// folder of a run that holds its checkpoints alone.
#pragma once

#include <filesystem>
#include <string>

namespace ampctl::run {

// `dir` holds a run: its metrics.jsonl and config.yaml (a project folder with its own config.yaml
// holds no metrics).
bool holds_run(const std::filesystem::path& dir);

// A sweep's results file, which marks its folder (`ampctl sweep` writes it there).
inline constexpr const char* kSweepFile = "sweep.json";

// `dir` holds a sweep's results (kSweepFile): no run is written into it, which would leave the
// sweep a folder that holds a run (`ampctl sweep` refuses those) and `ampctl report` a run.
bool holds_sweep(const std::filesystem::path& dir);

// Why `dir` is no place for a run or a sweep when it is or lies inside (through symlinks too) a
// run's checkpoints/ folder: "inside C, the checkpoint folder of the run in R"; else "". That
// folder holds its run's checkpoints alone (pruning, `latest` and the fallback to the newest
// complete checkpoint scan it).
std::string inside_checkpoints_folder(const std::filesystem::path& dir);

}  // namespace ampctl::run
