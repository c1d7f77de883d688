// The files a command writes at the user's request (`export --out`, `report --out`): a command
// writes only paths it owns (docs/reference.md, outputs).
//
// An output path is accepted when it names a new file in an existing folder, or an existing
// regular file (a symbolic link is followed to its target, which must be one) that is neither
// one of the command's inputs (compared by device and inode, so a hard link or a symlink to the
// input is caught too) nor a run's own file. Everything else is refused with Error{usage}
// (exit 2) naming the path and why: a directory, a device (/dev/null), a FIFO, a socket, a
// dangling symlink, a missing folder. A run's own files are, in a run or sweep directory (one
// holding metrics.jsonl, summary.json, checkpoints/latest, sweep.json, the lock or a sweep mark:
// run/layout.h's is_run_directory), the files ampctl writes there (run/layout.h's one list:
// config.yaml, metrics.jsonl, summary.json, vocab.json, input.json, events.out.tfevents.*, the
// lock, temporary files, sweep.json, ...) and anything inside its
// checkpoints/ folder, existing or not: a summary.json written there would make a sweep take an
// unfinished run for a finished one.
//
// The file is then written with write_file_atomic (a temporary file beside it, renamed over it),
// so a failed write leaves the previous content; a failure (no space, no permission, a file-size
// limit) is also Error{usage}, with the system's reason: the output is unusable, not the run.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ampctl::checkpoint {

// Checks `requested` (what the user gave to `flag`, e.g. "--out") as an output and returns the
// path to write: `requested` itself, or a symlink's target. `inputs` are the files the command
// reads (they must not be overwritten). Throws Error{usage} as described above.
std::filesystem::path checked_output_path(const std::filesystem::path& requested,
                                          const std::vector<std::filesystem::path>& inputs,
                                          const std::string& flag);

// write_file_atomic(path, bytes), with any failure as Error{usage} naming `flag` and the reason.
void write_output_file(const std::filesystem::path& path, std::string_view bytes,
                       const std::string& flag);

}  // namespace ampctl::checkpoint
