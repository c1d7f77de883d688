// Reading every file a command opens (configurations, checkpoints, `latest`, data files, a run
// directory's metrics.jsonl, summary.json and vocabulary, a sweep's files), so that a wrong
// path is an error at once, never a hang or an unbounded read: the file must be a regular file
// (a FIFO would block the open or the read forever, a device such as /dev/zero never ends, a
// directory is no data), whole-file reads stop at a size cap and line reads at a line cap.
//
// Invariants: nothing here blocks on a FIFO (the open is O_NONBLOCK and the type is checked
// with fstat before any read); a failed read is never taken for the end of the file (read(2)'s
// error is an error; the end is read(2) returning 0); bad input (not a regular file, over a
// cap) is Error{input} (exit 2) naming the path (and the line); a read error or an allocation
// that fails is Error{runtime} (exit 1) naming the file and, for memory, what was being
// allocated. A caller therefore never acts on part of a file: whatever it read, it read all of.
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

// A file read line by line (metrics.jsonl, logs): a 64 KiB buffer, so a file of any length costs
// only its longest line, and that line is capped. Opened as read_regular_file opens.
class LineReader {
 public:
  // Throws Error{input} naming `path` when it is missing, unreadable or not a regular file.
  LineReader(const std::filesystem::path& path, size_t max_line_bytes, std::string_view what = {});
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line, without its '\n', into `line`; false at the end of the file (and only
  // there). A line longer than the cap is Error{input} "WHAT PATH: line N is longer than M (the
  // limit for a line of this file)"; a read error or a failed allocation Error{runtime}.
  bool next(std::string& line);
  // The number of the line next() returned last (1 for the first).
  int64_t line_number() const { return m_line_no; }
  // Whether that line ended in '\n' (false only for the last line of a file that does not end
  // in one: the torn end of a writer that was killed).
  bool terminated() const { return m_terminated; }
  const std::filesystem::path& path() const { return m_path; }

 private:
  bool fill();

  std::filesystem::path m_path;
  std::string m_what;
  size_t m_max_line;
  int m_fd = -1;
  std::string m_buf;
  size_t m_pos = 0;
  size_t m_end = 0;
  bool m_eof = false;
  int64_t m_line_no = 0;
  bool m_terminated = true;
};

// The lines of a metrics.jsonl are a few hundred bytes; a numerics line names every parameter
// tensor (a few kilobytes for GPT-2 small). The cap is far above both and far below memory.
inline constexpr size_t kMaxMetricsLineBytes = size_t{16} << 20;

// A run's or sweep's JSON records (summary.json, sweep.json, a sweep run's mark, input.json):
// kilobytes; sweep.json of the largest grid a few megabytes.
inline constexpr size_t kMaxRecordBytes = size_t{64} << 20;

// Bytes of host memory a new allocation can get without swapping: the smallest of MemAvailable
// from /proc/meminfo (else sysinfo's free + buffer RAM), the cgroup's memory.max less its
// memory.current (every level up to the root), and address_space_available(); nullopt when none
// of them is known. What the process holds already is not available: a limit counts it.
std::optional<uint64_t> host_memory_available();

// The address space a new mapping can still get under the process's limits: RLIMIT_AS (ulimit -v)
// less the process's VmSize, RLIMIT_DATA (ulimit -d) less its VmData; nullopt without a limit.
// Mappings that are reserved but mostly never touched (OpenBLAS's buffers, thread stacks) count
// here and not against the physical memory.
std::optional<uint64_t> address_space_available();

// Which limit address_space_available() is held to, for messages: "ulimit -v (RLIMIT_AS)" or
// "ulimit -d (RLIMIT_DATA)"; empty without a limit.
std::string address_space_limit_name();

// The address space one new thread maps for its stack: the default pthread stack size (from
// RLIMIT_STACK, 8 MiB by default) and its guard page.
uint64_t thread_stack_bytes();

// "1.5 GiB", "512 KiB", "100 bytes": a byte count for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace ampctl
