// Whole-file reads and crash-safe whole-file writes.
//
// write_file_atomic's invariant: at every moment `path` holds either its previous content or
// the complete new content, never a mix or a truncation, whatever happens to the process (a
// signal, a full disk, a crash). It writes a temporary file in the same directory (so the
// rename cannot cross file systems), fsyncs it, renames it over `path` (atomic in POSIX), then
// fsyncs the directory so the rename itself survives a power loss.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace ampctl::checkpoint {

// Throws Error{runtime} "cannot write PATH: STRERROR (WHILE DOING WHAT)" on any failure (no
// such directory, no permission, ENOSPC, EFBIG, EIO, ...), after removing its temporary file;
// `path` is then untouched, except when only the final directory fsync fails: the new content
// is then in place but its rename may not survive a power loss. Temporary files are named
// ".NAME.tmp-*" (see is_temporary_file). Under RLIMIT_FSIZE the caller must ignore SIGXFSZ to
// get EFBIG rather than being killed.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// True for the names write_file_atomic gives its temporary files ("." + target + ".tmp-PID-HEX",
// PID the writer's). Such a file left behind is the trace of a write that was killed before its
// rename.
bool is_temporary_file(const std::filesystem::path& path);

// True for a temporary file that no live process is writing: this process's own, one whose
// writer's pid no longer exists, or one named before names carried a pid. A cleanup removes only
// these, never a file another process is writing right now.
bool temporary_file_orphaned(const std::filesystem::path& path);

// The most bytes a checkpoint file may hold: about 21 bytes per parameter (base64 of the fp32
// weights and AdamW's two moments), so a model of three billion parameters.
inline constexpr size_t kMaxCheckpointBytes = size_t{64} << 30;

// The whole file, a regular file of at most `max_bytes`. Throws Error{input} when it cannot be
// opened (missing, no permission), is not a regular file (a directory, a FIFO, a device: at
// once, without blocking) or is larger, and Error{runtime} when reading it fails.
std::string read_file(const std::filesystem::path& path, size_t max_bytes = kMaxCheckpointBytes);

}  // namespace ampctl::checkpoint
