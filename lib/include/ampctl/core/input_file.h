// Opening the files a user names as input (configurations, checkpoints, `latest`, data files)
// so that a wrong path is an error at once, never a hang or an unbounded read: the file must be
// a regular file (a FIFO would block the open or the read forever, a device such as /dev/zero
// never ends, a directory is no data), and whole-file reads stop at a cap.
//
// Invariants: nothing here blocks on a FIFO (the open is O_NONBLOCK and the type is checked
// with fstat before any read); every error is Error{input} (exit 2) naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ampctl {

// "a FIFO", "a directory", "a character device", ... for a file that is not regular; "" for a
// regular file. Follows symbolic links.
std::string non_regular_kind(const std::filesystem::path& path);

// Throws Error{input} "WHAT PATH: no such file" / "...: is a FIFO, not a regular file" unless
// `path` names a regular file (after following links). `what` ("configuration file",
// "checkpoint", "data file") starts the message; empty leaves it out.
void require_regular_file(const std::filesystem::path& path, std::string_view what = {});

// The whole regular file, at most `max_bytes` long (else Error{input} "PATH: larger than N
// bytes (the limit for WHAT)"). Never blocks on a FIFO.
std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes,
                              std::string_view what = {});

// Bytes of host memory a new allocation can get without swapping: MemAvailable from
// /proc/meminfo, else sysinfo's free + buffer RAM, and at most the process's RLIMIT_AS and
// RLIMIT_DATA (ulimit -v); nullopt when none of them is known.
std::optional<uint64_t> host_memory_available();

// "1.5 GiB", "512 KiB", "100 bytes": a byte count for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace ampctl
