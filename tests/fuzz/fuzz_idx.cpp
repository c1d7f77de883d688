// Fuzzes the IDX (MNIST format) reader through the files it reads: plain or gzip, images or
// labels, or an images + labels pair through load_idx (which also checks the labels).
//
// Input: byte 0 picks the reader (% 3: images, labels, pair); for the pair, bytes 1-2 (little
// endian) are the length of the images file, the rest is the labels file. Each file is a memfd,
// so gzip data in the input takes the same zlib path as a .gz on disk.
#include <algorithm>
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/data/idx.h"
#include "fuzz_util.h"

using namespace ampctl;

namespace {

void check_images(const data::IdxImages& images) {
  const auto n = static_cast<size_t>(images.count * images.rows * images.cols);
  if (images.count < 1 || images.rows < 1 || images.cols < 1 || images.pixels.size() != n) {
    fuzz::invariant_failed("read_idx_images returned inconsistent dimensions");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  if (mode != 2) {
    const fuzz::MemFile file(rest);
    try {
      if (mode == 0) {
        check_images(data::read_idx_images(file.path()));
      } else if (data::read_idx_labels(file.path()).empty()) {
        fuzz::invariant_failed("read_idx_labels returned no labels");
      }
    } catch (const Error& e) {
      // refused with a message: the expected outcome for bad input
      fuzz::check_refusal(e, ErrorKind::input, file.path());
    }
    return 0;
  }
  if (rest.size() < 2) return 0;
  const size_t claimed =
      static_cast<uint8_t>(rest[0]) | static_cast<size_t>(static_cast<uint8_t>(rest[1])) << 8;
  const size_t split = std::min(rest.size() - 2, claimed);
  const fuzz::MemFile images(rest.substr(2, split));
  const fuzz::MemFile labels(rest.substr(2 + split));
  try {
    data::check_dataset(data::load_idx(images.path(), labels.path()));
  } catch (const Error& e) {
    // Either file may be the one at fault: the message names the one it is about.
    fuzz::check_refusal(e, ErrorKind::input, "/proc/self/fd/");
  }
  return 0;
}
