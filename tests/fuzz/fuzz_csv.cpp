// Fuzzes the CSV reader with every combination of its settings.
//
// Input: byte 0 holds the settings: bit 0 the task (classification / regression), bit 1
// header: true, bits 2-4 the label column (index 0, 1, -1, -3, 1000, or the names "label", "y",
// "" ... see kColumns), bit 5 reads through load_csv from a file (memfd; gzip data takes the
// zlib path) instead of parse_csv from memory. The rest is the CSV text.
// On success the Dataset invariants hold (check_dataset must accept it).
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/data/csv.h"
#include "fuzz_util.h"

using namespace ampctl;

namespace {

const data::LabelColumn kColumns[8] = {{"", 0},    {"", 1},      {"", -1}, {"", -3},
                                       {"", 1000}, {"label", 0}, {"y", 0}, {"", INT64_MIN}};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const auto task = flags & 1 ? data::Task::regression : data::Task::classification;
  const bool header = flags & 2;
  const data::LabelColumn& column = kColumns[(flags >> 2) & 7];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  const bool from_file = flags & 32;
  const fuzz::MemFile file(from_file ? text : std::string_view());
  const std::string origin = from_file ? file.path() : "fuzz.csv";
  try {
    const data::Dataset d = from_file ? data::load_csv(file.path(), task, column, header)
                                      : data::parse_csv(text, origin, task, column, header);
    data::check_dataset(d);
  } catch (const Error& e) {
    // refused with a message: the expected outcome for bad input
    fuzz::check_refusal(e, ErrorKind::input, origin);
  }
  return 0;
}
