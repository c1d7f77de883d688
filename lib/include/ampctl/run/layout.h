// Where runs are, as the commands that write them see it: a folder holding a run, and the one
// folder of a run that holds its checkpoints alone.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ampctl::run {

// `dir` holds a run: its metrics.jsonl and config.yaml (a project folder with its own config.yaml
// holds no metrics).
bool holds_run(const std::filesystem::path& dir);

// A sweep's results file, which marks its folder (`ampctl sweep` writes it there).
inline constexpr const char* kSweepFile = "sweep.json";

// `dir` holds a sweep's results (kSweepFile): no run is written into it, which would leave the
// sweep a folder that holds a run (`ampctl sweep` refuses those) and `ampctl report` a run.
bool holds_sweep(const std::filesystem::path& dir);

// The files ampctl writes inside a run or a sweep directory, the one list every writer checks:
// config.yaml, metrics.jsonl, summary.json, vocab.json, input.json, checkpoints/, the lock, the
// sweep's mark, logs and results. An output a command writes at the user's request (export
// --out, report --out, replay --html: checkpoint/output_file.h) is refused when it is one of
// them, and a run's claim of its directory (train/run_dir.h) refuses one that exists and is
// not a regular file (a directory, for checkpoints/).
const std::vector<std::string>& run_file_names();

// `name` is one of run_file_names(), or of the families of names a run writes: TensorBoard's
// events.out.tfevents.*, the atomic writer's temporaries (.NAME.tmp-PID-HEX), the write probe
// (.ampctl-write-test-PID) and a sweep's per-run locks (.<run>.lock).
bool is_run_file_name(const std::string& name);

// `dir` holds a run's or a sweep's files: metrics.jsonl, summary.json, sweep.json, a sweep
// run's mark, the run lock or checkpoints/latest (a symbolic link of that name counts too).
bool is_run_directory(const std::filesystem::path& dir);

// The first of `dir`'s run files (run_file_names()) that exists and is not a regular file
// (checkpoints/: not a directory; a file in it, such as latest, not a regular file) as "PATH
// is a FIFO (named pipe)", following symbolic links;
// "" when there is none. A FIFO would block the open that writes or reads it forever, a device
// such as /dev/zero would never end.
std::string non_regular_run_file(const std::filesystem::path& dir);

// Why `dir` is no place for a run or a sweep when it is or lies inside (through symlinks too) a
// run's checkpoints/ folder: "inside C, the checkpoint folder of the run in R"; else "". That
// folder holds its run's checkpoints alone (pruning, `latest` and the fallback to the newest
// complete checkpoint scan it).
std::string inside_checkpoints_folder(const std::filesystem::path& dir);

}  // namespace ampctl::run
