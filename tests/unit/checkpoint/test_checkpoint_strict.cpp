// What a checkpoint may not be: bytes after its JSON document, duplicate keys anywhere, a step
// near int64's end or past the run's own max_steps, a file that is not a regular file (a FIFO is
// refused without blocking), and a `latest` whose content is never echoed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/core/error.h"
#include "checkpoint_test_util.h"

namespace ampctl::checkpoint {
namespace {

using testing::make_sample;
using testing::ScratchDir;
using ojson = nlohmann::ordered_json;

constexpr const char* kOrigin = "runs/x/checkpoints/step-00000042.json";

std::string error_of(const std::string& text) {
  try {
    parse_checkpoint(text, kOrigin);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(std::string(kOrigin) + ": ", 0), 0u) << message;
    return message;
  }
  ADD_FAILURE() << "accepted:\n" << text.substr(0, 200);
  return {};
}

TEST(CheckpointStrict, BytesAfterTheDocumentAreRefused) {
  const std::string good = serialize(make_sample(3, 42));
  ASSERT_NO_THROW(parse_checkpoint(good, kOrigin));
  ASSERT_NO_THROW(parse_checkpoint(good + "\n\n  \t", kOrigin));  // trailing whitespace is JSON
  for (const std::string& tail : {std::string("garbage"), std::string("\0\0\0", 3), good,
                                  std::string("{}"), std::string("]"), std::string("\x1b[2J")}) {
    EXPECT_NE(error_of(good + tail), "");
  }
}

TEST(CheckpointStrict, DuplicateKeysAreRefusedAtAnyDepth) {
  const std::string good = serialize(make_sample(3, 42));
  std::string top = good;
  top.replace(top.find("\"step\":"), 7, "\"step\": 1,\n\"step\":");
  EXPECT_NE(error_of(top).find("duplicate key \"step\""), std::string::npos);
  std::string nested = good;
  nested.replace(nested.find("\"lr\":"), 5, "\"lr\": 7, \"lr\":");
  EXPECT_NE(error_of(nested).find("duplicate key \"lr\""), std::string::npos);
  std::string tensor = good;
  tensor.replace(tensor.find("\"dtype\":"), 8, "\"dtype\": \"f32\", \"dtype\":");
  EXPECT_NE(error_of(tensor).find("duplicate key \"dtype\""), std::string::npos);
  // Equal keys in different objects are fine (every tensor has a "dtype").
  EXPECT_NO_THROW(parse_checkpoint(good, kOrigin));
}

TEST(CheckpointStrict, StepsAreBounded) {
  ojson doc = ojson::parse(serialize(make_sample(3, 42)));
  doc.erase("crc32");  // edited below: checked as a document written before the CRC existed
  doc["step"] = INT64_MAX;
  EXPECT_NE(
      error_of(doc.dump()).find("step: 9223372036854775807 is beyond the most a run may take"),
      std::string::npos);
  doc["step"] = 1000000000001;
  EXPECT_NE(error_of(doc.dump()).find("is beyond the most"), std::string::npos);
  doc["step"] = 1000000000000;
  EXPECT_NO_THROW(parse_checkpoint(doc.dump(), kOrigin));
  // Past the run's own training.max_steps: not a checkpoint ampctl wrote.
  doc["config"]["training"] = {{"max_steps", 100}};
  doc["step"] = 101;
  EXPECT_NE(error_of(doc.dump()).find("step: 101 is beyond the run's training.max_steps (100)"),
            std::string::npos);
  doc["step"] = 100;
  EXPECT_NO_THROW(parse_checkpoint(doc.dump(), kOrigin));
}

TEST(CheckpointStrict, OnlyRegularFilesAreRead) {
  ScratchDir dir;
  const auto fifo = dir.path() / "step-00000001.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Nobody writes to it: a blocking open would hang here.
  EXPECT_THROW(read_checkpoint(fifo), Error);
  try {
    read_checkpoint(fifo);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("is a FIFO"), std::string::npos) << e.what();
  }
  try {
    read_file("/dev/zero");
    ADD_FAILURE() << "/dev/zero was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("character device"), std::string::npos) << e.what();
  }
  // The size cap: a file one byte over it is refused before it is read.
  const auto big = dir.path() / "big.json";
  std::ofstream(big) << "{}  ";
  EXPECT_THROW(read_file(big, 3), Error);
  EXPECT_EQ(read_file(big, 4), "{}  ");
}

TEST(CheckpointStrict, LatestIsNeverEchoed) {
  ScratchDir dir;
  const auto ck = dir.path() / "checkpoints";
  std::filesystem::create_directories(ck);
  std::ofstream(ck / "latest") << "SECRET-TOKEN-0123456789\n";
  try {
    load_checkpoint(dir.path());
    ADD_FAILURE() << "a run without checkpoints loaded";
  } catch (const Error& e) {
    const std::string all = std::string(e.what()) + e.hint();
    EXPECT_EQ(all.find("SECRET"), std::string::npos) << all;
    EXPECT_NE(all.find("does not hold a checkpoint file name"), std::string::npos) << all;
  }
  // With a good checkpoint beside it, the FIFO or the foreign latest is passed over.
  write_file_atomic(ck / "step-00000042.json", serialize(make_sample(3, 42)));
  EXPECT_EQ(load_checkpoint(dir.path()).data.step, 42);
  std::filesystem::remove(ck / "latest");
  ASSERT_EQ(::mkfifo((ck / "latest").c_str(), 0600), 0);
  EXPECT_EQ(load_checkpoint(dir.path()).data.step, 42);
}

}  // namespace
}  // namespace ampctl::checkpoint
