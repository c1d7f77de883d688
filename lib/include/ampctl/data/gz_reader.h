// GzReader: one input file read through zlib (gzopen/gzread), which decompresses gzip data and
// passes any other file through unchanged, so ".gz" and plain files take the same path.
// Errors are Error{input} naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ampctl::data {

class GzReader {
 public:
  // Throws when the file is missing, is not a regular file (a directory, a FIFO, a device: refused
  // at once, never blocking) or cannot be opened.
  explicit GzReader(const std::filesystem::path& file);
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `n` bytes; fewer only at the end of the data, or where a gzip stream stops
  // early (then cut_short() is true). Throws on a read error or damaged gzip data (the message
  // says which and how many bytes came before it).
  size_t read(void* out, size_t n);

  // Appends up to `n` bytes to `out`, growing it only by what was read (so a size claimed by a
  // corrupt header is never allocated up front). Returns the number appended.
  size_t append(std::vector<uint8_t>& out, size_t n);

  // True when the data is gzip-compressed (then sizes in messages are decompressed sizes).
  bool compressed();
  bool cut_short() const { return m_cut_short; }
  uint64_t bytes_read() const { return m_bytes_read; }
  const std::string& name() const { return m_name; }

 private:
  void* m_file = nullptr;  // gzFile, kept opaque so zlib.h stays out of this header
  std::string m_name;
  uint64_t m_bytes_read = 0;
  bool m_cut_short = false;
};

// The most bytes a text data file (csv, after decompression) may hold: a CSV this large parses
// into hundreds of millions of values; the cap keeps a small .gz that expands to gigabytes, or
// a wrong path, from exhausting memory.
inline constexpr size_t kMaxTextFileBytes = size_t{512} << 20;

// The whole (decompressed) content of a file, refused (Error{input}) past `max_bytes`: reading
// stops one byte after the cap.
std::string read_text_file(const std::filesystem::path& file, size_t max_bytes = kMaxTextFileBytes);

}  // namespace ampctl::data
