// TensorBoard event files (logging.tensorboard; docs/reference.md "TensorBoard"):
// events.out.tfevents.<unix seconds>.<host> in the run directory, which `tensorboard --logdir`
// reads (a sweep's run directories each hold their own, so --logdir sweeps/NAME compares them).
//
// Format. A TFRecord stream: each record is
//   uint64 length (little-endian), uint32 masked_crc32c(length bytes), data,
//   uint32 masked_crc32c(data),  masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8;
// the data of each record is a serialized tensorflow.Event: wall_time (field 1, double),
// step (2, int64), and either file_version (3, string, the first record: "brain.Event:2") or
// summary (5, Summary) with one Summary.Value: tag (1, string) and simple_value (2, float).
// The protobuf wire format is written by the small encoder here (varints, fixed64/fixed32 and
// length-delimited fields): six fields do not justify a libprotobuf dependency and generated
// code, and the project builds from Debian packages only.
//
// Crash safety: records are buffered and appended with one write(2) per flush(); a crash can
// only cut the last record short, and readers (TensorBoard's included) stop at a torn record, so
// every complete record before it stays readable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ampctl::run {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), table-driven, and TFRecord's mask.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The serialized Event of one scalar, and of the file_version record (with `step`: at that step,
// as PyTorch's SummaryWriter(purge_step=step) writes it).
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
std::string file_version_event(double wall_time, std::optional<int64_t> step = std::nullopt);
// An Event holding session_log (field 6) {status: START} at `step`: TensorBoard then discards
// the events of the same run directory at steps >= `step` read before it (a resumed run's
// restart; SummaryWriter(purge_step=step)).
std::string session_start_event(double wall_time, int64_t step);
// data framed as one TFRecord.
std::string tfrecord(std::string_view data);

class EventWriter {
 public:
  // Creates dir/events.out.tfevents.<seconds>.<host> (a new file: an existing one is never
  // overwritten, a ".N" suffix is added instead) and writes the file_version record; with
  // `purge_step` (a resumed run: its first step) both at that step and a SessionLog START
  // after it. Throws Error{runtime} naming the file when it cannot be created.
  explicit EventWriter(const std::filesystem::path& dir,
                       std::optional<int64_t> purge_step = std::nullopt);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // A scalar at `step`, buffered until flush().
  void scalar(int64_t step, std::string_view tag, double value);
  // Appends the buffered records (one write); Error{runtime} when the disk refuses them.
  void flush();
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
  int m_fd = -1;
  std::string m_buffer;
};

}  // namespace ampctl::run
