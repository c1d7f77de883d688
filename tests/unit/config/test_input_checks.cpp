// Input checks of the configuration: strings that reach JSON are UTF-8, float32 keys are normal
// float32 values, step counters are bounded, and the file itself is a regular file read under a
// cap (a FIFO or a device is refused before any read).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "ampctl/config/config_file.h"
#include "ampctl/config/run_config.h"
#include "ampctl/config/scalars.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::kMinimal;
using testing::only_problem;

TEST(ConfigInputChecks, Utf8Validation) {
  // Valid: ASCII, 2-, 3- and 4-byte forms, the extremes of each.
  for (const std::string s :
       {"", "plain", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\x80", "\xdf\xbf",
        "\xe0\xa0\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_EQ(utf8_problem(s), "") << s;
  }
  // Invalid: a stray continuation, a truncated sequence, overlong forms, surrogates, > U+10FFFF.
  const std::pair<std::string, std::string> bad[] = {
      {"a\x80", "byte 0x80 at offset 1"},
      {"ab\xc3", "byte 0xc3 at offset 2"},
      {"\xc0\xaf", "byte 0xc0 at offset 0"},
      {"\xe0\x80\xaf", "byte 0xe0 at offset 0"},
      {"\xed\xa0\x80", "byte 0xed"},
      {"\xf4\x90\x80\x80", "byte 0xf4"},
      {"\xff", "byte 0xff"},
      {"\xe2\x82", "byte 0xe2"},
  };
  for (const auto& [s, says] : bad) {
    const std::string message = utf8_problem(s);
    EXPECT_NE(message.find("must be valid UTF-8"), std::string::npos) << message;
    EXPECT_NE(message.find(says), std::string::npos) << message;
  }
}

TEST(ConfigInputChecks, StringKeysMustBeUtf8) {
  const Problem name = only_problem("name: \"r\xffn\"\nmodel: {}\ndata: {}\n");
  EXPECT_EQ(name.key, "name");
  EXPECT_EQ(name.where.line, 1);
  EXPECT_NE(name.message.find("must be valid UTF-8 (byte 0xff at offset 1"), std::string::npos);
  EXPECT_EQ(only_problem(kMinimal, {"debug.inject_tensor=a\xc3"}).key, "debug.inject_tensor");
  EXPECT_EQ(only_problem("model: {}\ndata: {train: {source: csv, path: \"d\xc0\xaf.csv\"}}\n").key,
            "data.train.path");
  EXPECT_EQ(only_problem("model: {}\ndata: {train: {source: csv, path: a.csv, label_column: "
                         "\"l\xfe\"}}\n")
                .key,
            "data.train.label_column");
  // A file stem that is not UTF-8 does not become the run's name.
  EXPECT_EQ(parse_config(kMinimal, "/dir/bad\xff.yaml").name, "run");
  EXPECT_EQ(parse_config(kMinimal, "/dir/caf\xc3\xa9.yaml").name, "caf\xc3\xa9");
}

TEST(ConfigInputChecks, Float32KeysMustBeNormal) {
  const double min_normal = std::numeric_limits<float>::min();
  for (const char* set :
       {"scaler.init_scale=1e-46", "scaler.init_scale=1e-44", "scaler.init_scale=1.1e-38",
        "scaler.growth_factor=1e39", "scaler.backoff_factor=1e-40", "scaler.max_scale=1e-39",
        "optimizer.eps=1e-45"}) {
    const Problem p = only_problem(kMinimal, {set});
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    EXPECT_EQ(p.key, key) << set;
    EXPECT_TRUE(p.message.find("normal float32") != std::string::npos ||
                p.message.find("finite in float32") != std::string::npos)
        << set << ": " << p.message;
  }
  // min_scale: 0 (no floor) stays valid, a subnormal does not.
  EXPECT_EQ(only_problem(kMinimal, {"scaler.min_scale=1e-45", "scaler.init_scale=1"}).key,
            "scaler.min_scale");
  EXPECT_EQ(parse_config(kMinimal, "x", {"scaler.min_scale=0"}).scaler.min_scale, 0.0);
  // The smallest normal float32 is accepted, and its reciprocal is finite.
  const RunConfig c = parse_config(kMinimal, "x", {"scaler.init_scale=1.2e-38"});
  EXPECT_GE(static_cast<float>(c.scaler.init_scale), static_cast<float>(min_normal));
  EXPECT_TRUE(std::isfinite(1.0f / static_cast<float>(c.scaler.init_scale)));
  // max_scale: .inf still means no cap.
  EXPECT_TRUE(std::isinf(parse_config(kMinimal, "x", {"scaler.max_scale=.inf"}).scaler.max_scale));
}

TEST(ConfigInputChecks, StepCountersAreBounded) {
  const Problem p = only_problem(kMinimal, {"training.max_steps=9223372036854775807"});
  EXPECT_EQ(p.key, "training.max_steps");
  EXPECT_NE(p.message.find("must be in [1, 1000000000000]"), std::string::npos) << p.message;
  EXPECT_EQ(only_problem(kMinimal, {"training.max_steps=1000000000001"}).key, "training.max_steps");
  EXPECT_EQ(parse_config(kMinimal, "x", {"training.max_steps=1000000000000"}).training.max_steps,
            kMaxSteps);
}

TEST(ConfigInputChecks, ATooDeepKeyIsReportedWhereItIs) {
  // A container nested past kMaxDepth reads as null; used as a key, the problem about it must
  // still name the file and line (found by fuzz_sweep: it had no position at all).
  const std::string deep = std::string(40, '[') + "1" + std::string(40, ']');
  const std::vector<Problem> problems =
      testing::problems_of(std::string(kMinimal) + "? " + deep + "\n: 1\n");
  ASSERT_FALSE(problems.empty());
  for (const Problem& p : problems) {
    EXPECT_EQ(p.where.origin, "run.yaml") << p.str();
    EXPECT_EQ(p.where.line, 3) << p.str();
  }
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() /
            ("ampctl_cfg_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::filesystem::path m_dir;
};

std::string only_message(const std::filesystem::path& file) {
  try {
    read_config_text(file);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_EQ(e.problems().size(), 1u);
    return e.problems().front().str();
  }
  ADD_FAILURE() << "no error for " << file;
  return {};
}

TEST_F(ConfigFile, OnlyRegularFilesAreRead) {
  const auto fifo = m_dir / "pipe.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: without O_NONBLOCK this open would never return.
  EXPECT_EQ(only_message(fifo),
            fifo.string() +
                ": cannot read the configuration file: is a FIFO (named pipe), not a "
                "regular file");
  EXPECT_EQ(only_message("/dev/zero"),
            "/dev/zero: cannot read the configuration file: is a character device, not a regular "
            "file");
  EXPECT_EQ(only_message(m_dir), m_dir.string() +
                                     ": cannot read the configuration file: is a directory, not a "
                                     "regular file");
  EXPECT_THROW(load_config(fifo), ConfigError);
}

TEST_F(ConfigFile, RelativeDataPathsAreReadFromTheFilesFolderAndOverridesFromTheCurrentOne) {
  // docs/reference.md, "Data sources": a relative path the file says is the file's folder's, one
  // an override says is the current directory's, and the resolved configuration holds both as
  // absolute paths (so reading it again from anywhere names the same files).
  const std::filesystem::path sub = m_dir / "configs";
  std::filesystem::create_directories(sub);
  const std::filesystem::path file = sub / "run.yaml";
  {
    std::ofstream out(file);
    out << "model: {type: mlp}\n"
           "data:\n"
           "  train: {source: csv, path: ../data/train.csv}\n"
           "  eval: {source: idx, images: eval/images.gz, labels: /abs/labels.gz}\n";
  }
  const RunConfig c = load_config(file);
  EXPECT_EQ(c.data.train.path, (m_dir / "data" / "train.csv").string());
  ASSERT_TRUE(c.data.eval.has_value());
  EXPECT_EQ(c.data.eval->images, (sub / "eval" / "images.gz").string());
  EXPECT_EQ(c.data.eval->labels, "/abs/labels.gz");

  const RunConfig o = load_config(file, {"data.train.path=other/train.csv"});
  EXPECT_EQ(o.data.train.path, (std::filesystem::current_path() / "other" / "train.csv").string());
  EXPECT_EQ(o.data.eval->images, c.data.eval->images);  // the file's, as before

  // The resolved YAML read again as another file's text names the same files.
  EXPECT_EQ(parse_config(to_yaml(c), (m_dir / "elsewhere" / "config.yaml").string()), c);
}

TEST_F(ConfigFile, SizeIsCapped) {
  const auto big = m_dir / "big.yaml";
  {
    std::FILE* f = std::fopen(big.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, (16 << 20), SEEK_SET), 0);  // 16 MiB + 1 byte, sparse
    std::fputc('\n', f);
    std::fclose(f);
  }
  EXPECT_NE(only_message(big).find("larger than 16.0 MiB"), std::string::npos);
  std::filesystem::resize_file(big, 16 << 20);
  EXPECT_EQ(read_config_text(big).size(), size_t{16} << 20);
}

}  // namespace
}  // namespace ampctl::config
