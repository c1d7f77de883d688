#include "ampctl/run/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "ampctl/core/error.h"

namespace ampctl::run {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// ---- the protobuf wire format: only what Event and Summary.Value need ----
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) {
  varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
void fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(bits >> (8 * i) & 0xff));
}
void f64(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(out, field, 1);
  fixed(out, bits, 8);
}
void f32(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(out, field, 5);
  fixed(out, bits, 4);
}
void bytes(std::string& out, int field, std::string_view s) {
  key(out, field, 2);
  varint(out, s.size());
  out.append(s);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  bytes(v, 1, tag);
  f32(v, 2, value);
  std::string summary;
  bytes(summary, 1, v);  // Summary.value (repeated), one entry
  std::string e;
  f64(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  bytes(e, 5, summary);
  return e;
}

std::string file_version_event(double wall_time, std::optional<int64_t> step) {
  std::string e;
  f64(e, 1, wall_time);
  if (step) {
    key(e, 2, 0);
    varint(e, static_cast<uint64_t>(*step));
  }
  bytes(e, 3, "brain.Event:2");
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;
  key(log, 1, 0);  // SessionLog.status
  varint(log, 1);  // START
  std::string e;
  f64(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  bytes(e, 6, log);  // Event.session_log
  return e;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  std::string len;
  fixed(len, data.size(), 8);
  out += len;
  fixed(out, masked_crc32c(len.data(), len.size()), 4);
  out.append(data);
  fixed(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

EventWriter::EventWriter(const std::filesystem::path& dir, std::optional<int64_t> purge_step) {
  const double t = now_seconds();
  const std::string base =
      "events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host_name();
  for (int n = 0; n < 1000 && m_fd < 0; ++n) {
    m_path = dir / (n == 0 ? base : base + "." + std::to_string(n));
    m_fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (m_fd < 0 && errno != EEXIST) break;
  }
  if (m_fd < 0) {
    throw Error{ErrorKind::runtime, "cannot create the TensorBoard event file " + m_path.string() +
                                        ": " + std::strerror(errno)};
  }
  m_buffer = tfrecord(file_version_event(t, purge_step));
  // What SummaryWriter(purge_step=N) writes: TensorBoard drops the earlier files' events at
  // steps >= N, which the interrupted run logged and this one logs again.
  if (purge_step) m_buffer += tfrecord(session_start_event(t, *purge_step));
  flush();
}

EventWriter::~EventWriter() {
  try {
    flush();
  } catch (...) {  // a destructor must not throw; the last flush's error was already reported
  }
  if (m_fd >= 0) ::close(m_fd);
}

void EventWriter::scalar(int64_t step, std::string_view tag, double value) {
  m_buffer += tfrecord(scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

void EventWriter::flush() {
  size_t done = 0;
  while (done < m_buffer.size()) {
    const ssize_t n = ::write(m_fd, m_buffer.data() + done, m_buffer.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      m_buffer.clear();
      throw Error{ErrorKind::runtime, "cannot write the TensorBoard event file " + m_path.string() +
                                          ": " + std::strerror(errno)};
    }
    done += static_cast<size_t>(n);
  }
  m_buffer.clear();
}

}  // namespace ampctl::run
