// The data readers' input checks: only regular files are read (a FIFO never blocks, a device
// never streams forever), an idx header declaring more than kMaxIdxBytes is refused before any
// data is read, and a text file (plain or .gz) is refused one byte past its cap.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "ampctl/data/csv.h"
#include "ampctl/data/gz_reader.h"
#include "ampctl/data/idx.h"
#include "data_test_util.h"

namespace ampctl::data {
namespace {

using testing::expect_input_error;
using testing::TempDir;

TEST(InputLimits, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const auto fifo = dir / "pipe.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Nobody writes to the FIFO: an open without O_NONBLOCK would wait here forever.
  expect_input_error([&] { GzReader reader(fifo); }, {"pipe.csv", "is a FIFO", "not a regular"});
  expect_input_error([&] { read_text_file(fifo); }, {"is a FIFO"});
  expect_input_error([&] { read_idx_images(fifo); }, {"is a FIFO"});
}

TEST(InputLimits, DevicesAndDirectoriesAreRefused) {
  expect_input_error([] { read_text_file("/dev/zero"); }, {"/dev/zero", "character device"});
  expect_input_error([] { read_idx_labels("/dev/null"); }, {"/dev/null", "character device"});
  TempDir dir;
  expect_input_error([&] { read_text_file(dir.path()); }, {"is a directory"});
  expect_input_error([&] { read_text_file(dir / "missing.csv"); }, {"missing.csv", "no such file"});
}

TEST(InputLimits, IdxHeaderOverTheCapIsRefusedBeforeReading) {
  TempDir dir;
  // 65536 x 256 x 16384 = 2^38 bytes declared, 4 bytes present: refused by the header alone.
  std::vector<uint8_t> bytes =
      testing::idx_bytes(kIdxImagesMagic, {65536, 256, 16384}, {1, 2, 3, 4});
  testing::write_gz(dir / "huge.gz", bytes);
  expect_input_error([&] { read_idx_images(dir / "huge.gz"); },
                     {"huge.gz", "65536 x 256 x 16384", "more than the 1.0 GiB"});
  expect_input_error([&] { read_idx_header(dir / "huge.gz", kIdxImagesMagic); },
                     {"more than the 1.0 GiB"});
  // Exactly at the cap the header is accepted (the data is then missing: truncated).
  bytes = testing::idx_bytes(kIdxLabelsMagic, {1u << 30}, {7});
  testing::write_bytes(dir / "cap.idx", bytes);
  const IdxHeader h = read_idx_header(dir / "cap.idx", kIdxLabelsMagic);
  EXPECT_EQ(h.payload, kMaxIdxBytes);
  EXPECT_EQ(h.header_bytes, 8u);
  // One more label is over it.
  testing::write_bytes(dir / "over.idx",
                       testing::idx_bytes(kIdxLabelsMagic, {(1u << 30) + 1}, {7}));
  expect_input_error([&] { read_idx_labels(dir / "over.idx"); }, {"more than the 1.0 GiB"});
}

TEST(InputLimits, IdxStopsAtTheDeclaredSize) {
  TempDir dir;
  // 2 labels declared, a megabyte of data behind them: one byte past the declared size is read.
  std::vector<uint8_t> data(1 << 20, 1);
  testing::write_gz(dir / "long.gz", testing::idx_bytes(kIdxLabelsMagic, {2}, data));
  expect_input_error([&] { read_idx_labels(dir / "long.gz"); },
                     {"long.gz", "more data than the header describes", "expected 10 bytes"});
}

TEST(InputLimits, TextFileCapCountsDecompressedBytes) {
  TempDir dir;
  const std::string text(1000, 'a');
  testing::write_text(dir / "a.csv", text);
  EXPECT_EQ(read_text_file(dir / "a.csv", 1000), text);
  expect_input_error([&] { read_text_file(dir / "a.csv", 999); },
                     {"a.csv", "more than 999 bytes", "limit for a text data file"});
  // 1 MB of text compresses to about a kilobyte: the cap is on what it expands to.
  const std::vector<uint8_t> big(1 << 20, 'x');
  testing::write_gz(dir / "b.csv.gz", big);
  expect_input_error([&] { read_text_file(dir / "b.csv.gz", 100000); },
                     {"b.csv.gz", "once decompressed"});
  EXPECT_EQ(read_text_file(dir / "b.csv.gz", big.size()).size(), big.size());
}

}  // namespace
}  // namespace ampctl::data
