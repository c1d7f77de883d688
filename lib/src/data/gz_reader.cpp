#include "ampctl/data/gz_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"

namespace ampctl::data {

namespace {

gzFile as_gz(void* f) {
  return static_cast<gzFile>(f);
}

// A read of data that the process cannot hold: Error{runtime} (exit 1) naming the file and the
// size, never the end of the data.
[[noreturn]] void out_of_memory(const std::string& file, size_t bytes) {
  throw Error{ErrorKind::runtime,
              "out of memory: cannot allocate " + format_bytes(bytes) + " to read " + file,
              "free memory or raise the process's memory limit (ulimit -v)"};
}

// gzread takes an unsigned count and returns an int: stay well inside both.
constexpr size_t kMaxChunk = size_t{1} << 24;

}  // namespace

GzReader::GzReader(const std::filesystem::path& file) : m_name(file.string()) {
  // O_NONBLOCK and fstat before zlib sees the descriptor: a FIFO would block the open (and
  // every read) forever, a device such as /dev/zero never ends.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw Error{ErrorKind::input,
                m_name + (err == ENOENT ? ": no such file"
                                        : ": cannot open: " + std::string(std::strerror(err)))};
  }
  struct stat st {};
  const int stat_rc = ::fstat(fd, &st);
  const int stat_err = errno;
  if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (stat_rc != 0) {
      throw Error{ErrorKind::input, m_name + ": cannot open: " + std::strerror(stat_err)};
    }
    throw Error{ErrorKind::input,
                m_name + ": is " + non_regular_kind(file) + ", not a regular file"};
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  errno = 0;
  m_file = gzdopen(fd, "rb");
  if (m_file == nullptr) {
    const int err = errno;
    ::close(fd);
    throw Error{ErrorKind::input, m_name + ": cannot open: " +
                                      (err != 0 ? std::strerror(err) : "out of memory in zlib")};
  }
  gzbuffer(as_gz(m_file), 1u << 17);
}

GzReader::~GzReader() {
  if (m_file != nullptr) gzclose_r(as_gz(m_file));
}

bool GzReader::compressed() {
  return gzdirect(as_gz(m_file)) == 0;
}

size_t GzReader::read(void* out, size_t n) {
  size_t total = 0;
  auto* dst = static_cast<unsigned char*>(out);
  while (total < n) {
    check_stop("reading the data");
    const auto want = static_cast<unsigned>(std::min(n - total, kMaxChunk));
    const int got = gzread(as_gz(m_file), dst + total, want);
    int errnum = Z_OK;
    const char* message = gzerror(as_gz(m_file), &errnum);
    if (got >= 0 && errnum == Z_BUF_ERROR) {
      // zlib's "unexpected end of file": the compressed stream stops early. What came before it
      // is good; the caller reports the short data as truncation.
      total += static_cast<size_t>(got);
      m_cut_short = true;
      break;
    }
    if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      const std::string what =
          errnum == Z_ERRNO ? std::string(std::strerror(errno)) : std::string(message);
      throw Error{ErrorKind::input,
                  m_name + ": " + (errnum == Z_ERRNO ? "read error: " : "damaged gzip data: ") +
                      what + " (after " + std::to_string(m_bytes_read + total) + " bytes)"};
    }
    total += static_cast<size_t>(got);
    if (static_cast<unsigned>(got) < want) break;  // end of data
  }
  m_bytes_read += total;
  return total;
}

size_t GzReader::append(std::vector<uint8_t>& out, size_t n) {
  // Chunks start small and double while the data keeps coming: a size claimed by a corrupt or
  // truncated header then costs an allocation of the order of the bytes really there, not
  // kMaxChunk (which a fuzzer would hit on every other input).
  constexpr size_t kFirstChunk = size_t{1} << 16;
  size_t total = 0;
  size_t limit = kFirstChunk;
  while (total < n) {
    const size_t chunk = std::min(n - total, limit);
    const size_t old = out.size();
    try {
      out.resize(old + chunk);
    } catch (const std::bad_alloc&) {
      out_of_memory(m_name, old + chunk);
    }
    const size_t got = read(out.data() + old, chunk);
    out.resize(old + got);
    total += got;
    if (got < chunk) break;
    limit = std::min(limit * 2, kMaxChunk);
  }
  return total;
}

std::string read_text_file(const std::filesystem::path& file, size_t max_bytes) {
  // Doubling chunks, as in append(): a small file costs a small buffer.
  size_t chunk = size_t{1} << 16;
  GzReader reader(file);
  std::string text;
  while (true) {
    const size_t old = text.size();
    // Never more than one byte past the cap: that byte is how a longer file is recognised.
    const size_t want = std::min(chunk, max_bytes + 1 - old);
    try {
      text.resize(old + want);
    } catch (const std::bad_alloc&) {
      out_of_memory(reader.name(), old + want);
    }
    const size_t got = reader.read(text.data() + old, want);
    text.resize(old + got);
    if (text.size() > max_bytes) {
      throw Error{ErrorKind::input,
                  reader.name() + ": more than " + format_bytes(max_bytes) +
                      (reader.compressed() ? " once decompressed" : "") +
                      ", the limit for a text data file",
                  "convert a data set this large to the idx format, or split it"};
    }
    if (got < want) break;
    chunk = std::min(chunk * 2, kMaxChunk);
  }
  if (reader.cut_short()) {
    throw Error{ErrorKind::input, reader.name() + ": truncated: the gzip stream ends after " +
                                      std::to_string(text.size()) + " bytes"};
  }
  return text;
}

}  // namespace ampctl::data
