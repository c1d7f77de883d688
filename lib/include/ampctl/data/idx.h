// IDX files (the MNIST format: yann.lecun.com/exdb/mnist): a big-endian header, then the data.
//   images: magic 0x00000803 (unsigned byte, 3 dimensions), then N, rows, cols (uint32 each),
//           then N * rows * cols bytes;
//   labels: magic 0x00000801 (unsigned byte, 1 dimension), then N, then N bytes.
// Files are read through zlib's gzopen/gzread, which decompresses gzip (".gz", or any file
// that starts with the gzip magic) and passes plain files through. Data is read in chunks, so
// memory follows the bytes actually present, never a size a corrupt header claims.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "ampctl/data/dataset.h"
#include "ampctl/data/options.h"

namespace ampctl::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803u;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801u;

// The most data bytes (after decompression) one idx file may declare: far above any MNIST-like
// set (Fashion-MNIST's training images are 47 MB, EMNIST's largest 550 MB), and small enough
// that loading it (bytes, then fp32 features: five times this) fits a workstation.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;

// An idx header: the dimensions, the data bytes they declare, the header's own size.
struct IdxHeader {
  std::vector<uint64_t> dims;
  uint64_t payload = 0;
  size_t header_bytes = 0;
};

// Reads only the header of `file` (magic kIdxImagesMagic or kIdxLabelsMagic); the same errors
// as the readers below for a bad header, including a declared size over kMaxIdxBytes.
IdxHeader read_idx_header(const std::filesystem::path& file, uint32_t magic);

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major per image
};

// Throw Error{input} naming the file: missing or unreadable, wrong magic (expected vs got),
// truncated (expected N bytes, got M) or with bytes after the data, no samples, a zero
// dimension, a damaged gzip stream.
IdxImages read_idx_images(const std::filesystem::path& file);
std::vector<uint8_t> read_idx_labels(const std::filesystem::path& file);

// An idx source: images as pixel features (rows * cols), labels as classes. `classes` > 0
// bounds the labels (a label >= classes is an error naming its index); 0 takes max label + 1.
Dataset load_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                 int64_t classes = 0);

// Fashion-MNIST from `dir`: train-{images-idx3,labels-idx1}-ubyte(.gz) for the train split,
// t10k-... for test; 10 classes. The .gz files are used when present, else the plain ones.
Dataset load_fashion_mnist(const std::filesystem::path& dir, DatasetSplit split);

}  // namespace ampctl::data
