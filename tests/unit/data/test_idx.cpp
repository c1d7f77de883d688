// IDX reading: round trips through a writer in the test (plain and gzip), every bad-file case
// with its message, and mutated files that must fail cleanly.
#include <gtest/gtest.h>

#include <algorithm>

#include "ampctl/data/idx.h"
#include "data_test_util.h"

namespace ampctl::data {
namespace {

using testing::expect_input_error;
using testing::idx_bytes;
using testing::random_bytes;
using testing::TempDir;
using testing::write_bytes;
using testing::write_gz;

constexpr uint32_t kCount = 7, kRows = 5, kCols = 4;

struct IdxPair {
  std::vector<uint8_t> pixels, labels;
  std::vector<uint8_t> image_file() const {
    return idx_bytes(kIdxImagesMagic, {kCount, kRows, kCols}, pixels);
  }
  std::vector<uint8_t> label_file() const { return idx_bytes(kIdxLabelsMagic, {kCount}, labels); }
};

IdxPair random_pair(uint64_t seed) {
  return {random_bytes(kCount * kRows * kCols, seed), random_bytes(kCount, seed + 1, 10)};
}

void expect_matches(const Dataset& d, const IdxPair& p) {
  ASSERT_EQ(d.size(), kCount);
  EXPECT_EQ(d.features, kRows * kCols);
  EXPECT_EQ(d.task, Task::classification);
  EXPECT_TRUE(d.pixels);
  EXPECT_EQ(d.classes, *std::max_element(p.labels.begin(), p.labels.end()) + 1);
  for (size_t i = 0; i < p.pixels.size(); ++i) ASSERT_EQ(d.x[i], p.pixels[i]) << "pixel " << i;
  for (size_t i = 0; i < p.labels.size(); ++i) ASSERT_EQ(d.labels[i], p.labels[i]) << "label " << i;
}

TEST(Idx, RoundTripPlain) {
  TempDir dir;
  const IdxPair p = random_pair(11);
  write_bytes(dir / "images.idx", p.image_file());
  write_bytes(dir / "labels.idx", p.label_file());
  const IdxImages images = read_idx_images(dir / "images.idx");
  EXPECT_EQ(images.count, kCount);
  EXPECT_EQ(images.rows, kRows);
  EXPECT_EQ(images.cols, kCols);
  EXPECT_EQ(images.pixels, p.pixels);
  EXPECT_EQ(read_idx_labels(dir / "labels.idx"), p.labels);
  expect_matches(load_idx(dir / "images.idx", dir / "labels.idx"), p);
}

TEST(Idx, RoundTripGzip) {
  TempDir dir;
  const IdxPair p = random_pair(12);
  write_gz(dir / "images.idx.gz", p.image_file());
  write_gz(dir / "labels.idx.gz", p.label_file());
  expect_matches(load_idx(dir / "images.idx.gz", dir / "labels.idx.gz"), p);
}

TEST(Idx, ExplicitClassCountBoundsLabels) {
  TempDir dir;
  IdxPair p = random_pair(13);
  write_bytes(dir / "images", p.image_file());
  write_bytes(dir / "labels", p.label_file());
  EXPECT_EQ(load_idx(dir / "images", dir / "labels", 10).classes, 10);
  p.labels[3] = 12;
  write_bytes(dir / "labels", p.label_file());
  expect_input_error([&] { load_idx(dir / "images", dir / "labels", 10); },
                     {(dir / "labels").string(), "label 12 at index 3 is out of range [0, 10)"});
}

TEST(Idx, MissingFileAndDirectory) {
  TempDir dir;
  expect_input_error([&] { read_idx_images(dir / "nope.gz"); },
                     {(dir / "nope.gz").string(), "no such file"});
  expect_input_error([&] { read_idx_labels(dir.path()); }, {"is a directory"});
}

TEST(Idx, WrongMagicSaysExpectedAndGot) {
  TempDir dir;
  const IdxPair p = random_pair(14);
  write_bytes(dir / "labels", p.label_file());
  write_bytes(dir / "images", p.image_file());
  try {
    read_idx_images(dir / "labels");
    FAIL() << "labels read as images";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("expected 0x00000803"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 0x00000801"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("swapped"), std::string::npos) << e.hint();
  }
  expect_input_error([&] { read_idx_labels(dir / "images"); },
                     {"expected 0x00000801", "got 0x00000803"});
  testing::write_text(dir / "text", "label,x\n1,2\n");
  expect_input_error([&] { read_idx_images(dir / "text"); },
                     {(dir / "text").string(), "wrong magic number", "got 0x6c616265"});
}

TEST(Idx, TruncatedHeaderAndData) {
  TempDir dir;
  const IdxPair p = random_pair(15);
  const auto full = p.image_file();
  write_bytes(dir / "short_header", {full.begin(), full.begin() + 10});
  expect_input_error([&] { read_idx_images(dir / "short_header"); },
                     {"truncated header: expected 16 bytes, got 10"});
  write_bytes(dir / "short_data", {full.begin(), full.end() - 7});
  expect_input_error(
      [&] { read_idx_images(dir / "short_data"); },
      {(dir / "short_data").string(), "truncated: expected " + std::to_string(full.size()) +
                                          " bytes, got " + std::to_string(full.size() - 7)});
  write_gz(dir / "short_data.gz", {full.begin(), full.end() - 7});
  expect_input_error([&] { read_idx_images(dir / "short_data.gz"); },
                     {"truncated: expected " + std::to_string(full.size()) +
                      " bytes (decompressed), got " + std::to_string(full.size() - 7)});
  write_bytes(dir / "empty", {});
  expect_input_error([&] { read_idx_labels(dir / "empty"); },
                     {"truncated header: expected 8 bytes, got 0"});
}

TEST(Idx, CutGzipStreamIsTruncation) {
  TempDir dir;
  // Incompressible data, so cutting the compressed file cuts the payload.
  const auto data = random_bytes(60 * 28 * 28, 16);
  write_gz(dir / "full.gz", idx_bytes(kIdxImagesMagic, {60, 28, 28}, data));
  const auto gz = testing::read_bytes(dir / "full.gz");
  write_bytes(dir / "cut.gz", {gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)});
  expect_input_error([&] { read_idx_images(dir / "cut.gz"); },
                     {(dir / "cut.gz").string(), "truncated", "gzip stream ends early"});
}

TEST(Idx, CorruptGzipIsReported) {
  TempDir dir;
  const auto data = random_bytes(60 * 28 * 28, 17);
  write_gz(dir / "full.gz", idx_bytes(kIdxImagesMagic, {60, 28, 28}, data));
  auto gz = testing::read_bytes(dir / "full.gz");
  // The CRC-32 of the data sits in the last 8 bytes: a flipped byte there is found only by the
  // trailer check, after all the data was read.
  gz[gz.size() - 6] ^= 0xff;
  write_bytes(dir / "bad_crc.gz", gz);
  expect_input_error([&] { read_idx_images(dir / "bad_crc.gz"); },
                     {(dir / "bad_crc.gz").string(), "damaged gzip data"});
}

TEST(Idx, TrailingBytesAreRefused) {
  TempDir dir;
  auto bytes = random_pair(18).label_file();
  bytes.push_back(0);
  write_bytes(dir / "labels", bytes);
  expect_input_error([&] { read_idx_labels(dir / "labels"); },
                     {"more data than the header describes: expected 15 bytes"});
}

TEST(Idx, EmptyDimensionsAreRefused) {
  TempDir dir;
  write_bytes(dir / "none", idx_bytes(kIdxImagesMagic, {0, 28, 28}, {}));
  expect_input_error([&] { read_idx_images(dir / "none"); },
                     {"holds no data (dimensions 0 x 28 x 28)"});
  write_bytes(dir / "flat", idx_bytes(kIdxImagesMagic, {5, 0, 28}, {}));
  expect_input_error([&] { read_idx_images(dir / "flat"); }, {"holds no data"});
}

TEST(Idx, HugeClaimedSizeIsRefusedNotAllocated) {
  TempDir dir;
  write_bytes(dir / "liar", idx_bytes(kIdxImagesMagic, {0xffffffffu, 0xffffffffu, 0xffffffffu},
                                      random_bytes(100, 19)));
  expect_input_error([&] { read_idx_images(dir / "liar"); },
                     {"the header declares 4294967295 x 4294967295 x 4294967295 bytes",
                      "more than the 1.0 GiB an idx file may hold"});
  // Within the cap, a size the file does not hold is truncation (memory follows the bytes read).
  write_bytes(dir / "short", idx_bytes(kIdxImagesMagic, {100, 1000, 1000}, random_bytes(100, 19)));
  expect_input_error([&] { read_idx_images(dir / "short"); },
                     {"truncated: expected 100000016 bytes, got 116"});
}

// 300,000 pixels: more than the reader's first chunks (64 KiB, then doubling), so the data
// arrives in several reads of growing size; every byte must land in order, and a file cut in a
// later chunk is reported with the exact count that was there.
TEST(Idx, LargeFilesReadAcrossGrowingChunks) {
  TempDir dir;
  constexpr uint32_t kN = 100, kR = 50, kC = 60;
  const std::vector<uint8_t> pixels = random_bytes(kN * kR * kC, 23);
  const std::vector<uint8_t> file = idx_bytes(kIdxImagesMagic, {kN, kR, kC}, pixels);
  write_bytes(dir / "plain", file);
  write_gz(dir / "packed.gz", file);
  for (const char* name : {"plain", "packed.gz"}) {
    const IdxImages images = read_idx_images(dir / name);
    EXPECT_EQ(images.count, kN) << name;
    EXPECT_TRUE(images.pixels == pixels) << name << ": pixels differ";
  }
  const std::vector<uint8_t> cut(file.begin(), file.end() - 1000);
  write_bytes(dir / "cut", cut);
  expect_input_error([&] { read_idx_images(dir / "cut"); },
                     {"truncated: expected 300016 bytes, got 299016"});
}

TEST(Idx, CountMismatch) {
  TempDir dir;
  const IdxPair p = random_pair(20);
  write_bytes(dir / "images", p.image_file());
  write_bytes(dir / "labels", idx_bytes(kIdxLabelsMagic, {kCount - 1}, random_bytes(6, 21, 10)));
  expect_input_error([&] { load_idx(dir / "images", dir / "labels"); },
                     {"label/image count mismatch", "has 7 images", "has 6 labels"});
}

TEST(Idx, FashionMnistFolderErrors) {
  TempDir dir;
  expect_input_error([&] { load_fashion_mnist(dir / "absent", data::DatasetSplit::train); },
                     {"no such folder", (dir / "absent").string()});
  expect_input_error([&] { load_fashion_mnist(dir.path(), data::DatasetSplit::test); },
                     {"has no t10k-images-idx3-ubyte.gz"});
  // A fake folder: plain (uncompressed) files are found too; labels must be < 10.
  const IdxPair p = random_pair(22);
  write_bytes(dir / "t10k-images-idx3-ubyte", p.image_file());
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", p.label_file());
  const Dataset d = load_fashion_mnist(dir.path(), data::DatasetSplit::test);
  EXPECT_EQ(d.classes, 10);
  EXPECT_EQ(d.size(), kCount);
  IdxPair bad = p;
  bad.labels[5] = 10;
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", bad.label_file());
  expect_input_error([&] { load_fashion_mnist(dir.path(), data::DatasetSplit::test); },
                     {"label 10 at index 5 is out of range [0, 10)"});
}

// Mutated files (bytes flipped, cut, extended; plain and gzip) fail with ampctl::Error or load
// a valid data set; they never crash or throw anything else.
TEST(Idx, MutatedFilesFailCleanly) {
  TempDir dir;
  const IdxPair p = random_pair(23);
  std::mt19937_64 rng(24);
  int loaded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto images = p.image_file(), labels = p.label_file();
    auto& target = trial % 2 ? images : labels;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          target[rng() % target.size()] = static_cast<uint8_t>(rng());
          break;
        case 1:
          target.resize(rng() % target.size());
          break;
        default:
          target.push_back(static_cast<uint8_t>(rng()));
          break;
      }
      if (target.empty()) target.push_back(0);
    }
    const bool gz = trial % 4 >= 2;
    const auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
      if (gz) {
        write_gz(dir / name, bytes);
      } else {
        write_bytes(dir / name, bytes);
      }
    };
    write("images", images);
    write("labels", labels);
    testing::expect_only_ampctl_errors(
        [&] {
          const Dataset d = load_idx(dir / "images", dir / "labels");
          check_dataset(d);
          ++loaded;
        },
        "trial " + std::to_string(trial));
  }
  // Some mutations (a changed pixel or label) leave a valid file.
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, 400);
}

}  // namespace
}  // namespace ampctl::data
