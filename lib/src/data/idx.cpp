#include "ampctl/data/idx.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/data/gz_reader.h"

namespace ampctl::data {

namespace {

// Features are indexed with int32 by the model and the kernels.
constexpr uint64_t kMaxImagePixels = 0x7fffffffu;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

std::string describe_magic(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "idx images: unsigned bytes, 3 dimensions";
  if (magic == kIdxLabelsMagic) return "idx labels: unsigned bytes, 1 dimension";
  return "";
}

// The header of an unsigned-byte idx file whose magic must be `expected_magic` (its low byte is
// the number of dimensions). Refuses, before any data is read, a header that declares no data
// or more than kMaxIdxBytes: decompression then stops at the declared size (plus one byte, to
// find data the header does not describe), so a small .gz that expands to gigabytes is refused
// by its header, or by that one byte.
IdxHeader read_header(GzReader& in, uint32_t expected_magic) {
  const size_t ndim = expected_magic & 0xffu;
  const size_t header_bytes = 4 + 4 * ndim;
  uint8_t header[4 + 4 * 3];
  const size_t got = in.read(header, header_bytes);
  const std::string unit = in.compressed() ? " bytes (decompressed)" : " bytes";
  if (got >= 4) {
    const uint32_t magic = big_endian_u32(header);
    if (magic != expected_magic) {
      std::string message = in.name() + ": wrong magic number: expected " + hex32(expected_magic) +
                            " (" + describe_magic(expected_magic) + "), got " + hex32(magic);
      const std::string got_what = describe_magic(magic);
      if (!got_what.empty()) message += " (" + got_what + ")";
      std::string hint = got_what.empty() ? "this is not an MNIST-format (idx) file"
                         : expected_magic == kIdxImagesMagic
                             ? "this looks like a labels file; are images and labels swapped?"
                             : "this looks like an images file; are images and labels swapped?";
      throw Error{ErrorKind::input, message, hint};
    }
  }
  if (got < header_bytes) {
    throw Error{ErrorKind::input, in.name() + ": truncated header: expected " +
                                      std::to_string(header_bytes) + unit + ", got " +
                                      std::to_string(got)};
  }
  IdxHeader h;
  h.header_bytes = header_bytes;
  h.dims.resize(ndim);
  unsigned __int128 payload = 1;  // uint32 dimensions: below 2^96, no overflow
  std::string shape;
  for (size_t d = 0; d < ndim; ++d) {
    h.dims[d] = big_endian_u32(header + 4 + 4 * d);
    payload *= h.dims[d];
    shape += (d ? " x " : "") + std::to_string(h.dims[d]);
  }
  if (payload == 0) {
    throw Error{ErrorKind::input, in.name() + ": holds no data (dimensions " + shape + ")"};
  }
  if (payload > kMaxIdxBytes) {
    throw Error{ErrorKind::input,
                in.name() + ": the header declares " + shape + " bytes of data, more than the " +
                    format_bytes(kMaxIdxBytes) + " an idx file may hold",
                "split the data set, or check that this is the file you meant"};
  }
  h.payload = static_cast<uint64_t>(payload);
  return h;
}

// Reads the data the header declares into `data` (appended) and checks that nothing follows.
std::vector<uint64_t> read_idx(GzReader& in, uint32_t expected_magic, std::vector<uint8_t>& data) {
  const IdxHeader h = read_header(in, expected_magic);
  const std::string unit = in.compressed() ? " bytes (decompressed)" : " bytes";
  const uint64_t expected = h.header_bytes + h.payload;
  // The pixels are held twice while loading (as bytes, then as fp32 features).
  if (const std::optional<uint64_t> available = host_memory_available();
      available && h.payload * 5 > *available) {
    throw Error{ErrorKind::input, in.name() + ": " + format_bytes(h.payload) +
                                      " of data need about " + format_bytes(h.payload * 5) +
                                      " of memory to load, and " + format_bytes(*available) +
                                      " is available"};
  }
  const size_t got_data = in.append(data, static_cast<size_t>(h.payload));
  if (got_data < h.payload) {
    throw Error{ErrorKind::input, in.name() + ": truncated: expected " + std::to_string(expected) +
                                      unit + ", got " + std::to_string(h.header_bytes + got_data) +
                                      (in.cut_short() ? " (the gzip stream ends early)" : "")};
  }
  uint8_t extra = 0;
  if (in.read(&extra, 1) != 0) {
    throw Error{ErrorKind::input, in.name() + ": more data than the header describes: expected " +
                                      std::to_string(expected) + unit + ", the file is longer"};
  }
  return h.dims;
}

}  // namespace

IdxHeader read_idx_header(const std::filesystem::path& file, uint32_t magic) {
  GzReader in(file);
  return read_header(in, magic);
}

IdxImages read_idx_images(const std::filesystem::path& file) {
  GzReader in(file);
  IdxImages images;
  const auto dims = read_idx(in, kIdxImagesMagic, images.pixels);
  if (dims[1] * dims[2] > kMaxImagePixels) {
    throw Error{ErrorKind::input, in.name() + ": images of " + std::to_string(dims[1]) + " x " +
                                      std::to_string(dims[2]) + " pixels are too large"};
  }
  images.count = static_cast<int64_t>(dims[0]);
  images.rows = static_cast<int64_t>(dims[1]);
  images.cols = static_cast<int64_t>(dims[2]);
  return images;
}

std::vector<uint8_t> read_idx_labels(const std::filesystem::path& file) {
  GzReader in(file);
  std::vector<uint8_t> labels;
  read_idx(in, kIdxLabelsMagic, labels);
  return labels;
}

Dataset load_idx(const std::filesystem::path& images_file, const std::filesystem::path& labels_file,
                 int64_t classes) {
  const IdxImages images = read_idx_images(images_file);
  const std::vector<uint8_t> labels = read_idx_labels(labels_file);
  const auto n_labels = static_cast<int64_t>(labels.size());
  if (n_labels != images.count) {
    throw Error{ErrorKind::input, "label/image count mismatch: " + images_file.string() + " has " +
                                      std::to_string(images.count) + " images, " +
                                      labels_file.string() + " has " + std::to_string(n_labels) +
                                      " labels"};
  }
  Dataset out;
  out.task = Task::classification;
  out.features = images.rows * images.cols;
  out.pixels = true;
  out.image = {1, images.rows, images.cols};  // IDX images are single-channel
  out.origin = images_file.string();
  out.labels.resize(labels.size());
  int64_t max_label = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t label = labels[i];
    if (classes > 0 && label >= classes) {
      throw Error{ErrorKind::input, labels_file.string() + ": label " + std::to_string(label) +
                                        " at index " + std::to_string(i) + " is out of range [0, " +
                                        std::to_string(classes) + ")"};
    }
    max_label = std::max(max_label, label);
    out.labels[i] = static_cast<int32_t>(label);
  }
  out.classes = classes > 0 ? classes : max_label + 1;
  out.x.assign(images.pixels.begin(), images.pixels.end());
  return out;
}

Dataset load_fashion_mnist(const std::filesystem::path& dir, DatasetSplit split) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw Error{ErrorKind::input, "fashion_mnist: no such folder: " + dir.string(),
                "install the Debian package dataset-fashion-mnist, or point dir: at a folder "
                "with the four Fashion-MNIST idx files"};
  }
  const std::string prefix = split == DatasetSplit::train ? "train" : "t10k";
  const auto find = [&](const std::string& stem) {
    const std::filesystem::path gz = dir / (stem + ".gz"), plain = dir / stem;
    if (std::filesystem::exists(gz, ec)) return gz;
    if (std::filesystem::exists(plain, ec)) return plain;
    throw Error{ErrorKind::input,
                "fashion_mnist: " + dir.string() + " has no " + stem + ".gz (nor " + stem + ")",
                "the folder needs train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
                "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz"};
  };
  const auto images = find(prefix + "-images-idx3-ubyte");
  const auto labels = find(prefix + "-labels-idx1-ubyte");
  constexpr int64_t kFashionClasses = 10;
  return load_idx(images, labels, kFashionClasses);
}

}  // namespace ampctl::data
