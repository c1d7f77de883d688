// The shared readers of core/input_file.h: LineReader returns every line of a file and ends only
// at its end (lines across its 64 KiB buffer, a last line without '\n', CRs kept), refuses a
// line over its cap naming the file and the line, and, as read_regular_file, refuses a FIFO or a
// device at once without blocking. The lines are checked against the file's text split by
// std::string's own find, for seeded random texts.
#include "ampctl/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "test_util.h"

namespace ampctl {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// The reference: `text` split at '\n', a trailing '\n' ending the last line rather than
// starting an empty one.
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      out.push_back(text.substr(start));
      break;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

TEST(LineReader, ReadsEveryLineOfRandomTextsToTheEnd) {
  const testing::ScratchDir dir("input-file");
  std::mt19937 rng(47);
  for (int trial = 0; trial < 40; ++trial) {
    std::string text;
    const int lines = static_cast<int>(rng() % 50);
    for (int i = 0; i < lines; ++i) {
      // Some lines cross the 64 KiB buffer; some are empty; some carry a '\r'.
      const size_t len = rng() % 4 == 0 ? rng() % 200000 : rng() % 80;
      for (size_t k = 0; k < len; ++k) text += static_cast<char>('a' + rng() % 26);
      if (rng() % 5 == 0) text += '\r';
      if (i + 1 < lines || rng() % 2 == 0) text += '\n';
    }
    const fs::path file = dir.path() / "lines.txt";
    write(file, text);
    const std::vector<std::string> want = split(text);
    LineReader in(file, size_t{1} << 20);
    std::string line;
    std::vector<std::string> got;
    while (in.next(line)) {
      got.push_back(line);
      EXPECT_EQ(in.line_number(), static_cast<int64_t>(got.size()));
    }
    ASSERT_EQ(got, want) << "trial " << trial;
    if (!text.empty()) {
      EXPECT_EQ(in.terminated(), text.back() == '\n') << "trial " << trial;
    }
    EXPECT_FALSE(in.next(line)) << "the end stays the end";
  }
}

TEST(LineReader, RefusesALineOverTheCapNamingTheFileAndTheLine) {
  const testing::ScratchDir dir("input-file");
  const fs::path file = dir.path() / "metrics.jsonl";
  write(file, "{}\n{}\n" + std::string(5000, 'x') + "\n{}\n");
  LineReader in(file, 4096, "metrics file");
  std::string line;
  ASSERT_TRUE(in.next(line));
  ASSERT_TRUE(in.next(line));
  try {
    in.next(line);
    FAIL() << "a 5000-byte line under a 4096-byte cap was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find("line 3"), std::string::npos) << what;
  }
  // A line exactly at the cap is read.
  write(file, std::string(4096, 'y'));
  LineReader exact(file, 4096);
  ASSERT_TRUE(exact.next(line));
  EXPECT_EQ(line.size(), 4096u);
}

TEST(LineReader, RefusesAFifoAndADeviceAtOnce) {
  const testing::ScratchDir dir("input-file");
  const fs::path fifo = dir.path() / "metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // With no writer, a blocking open would never return: the test would hang, not fail.
  for (const fs::path& p : {fifo, fs::path("/dev/zero")}) {
    try {
      LineReader in(p, 1024);
      FAIL() << p << " was opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
    EXPECT_THROW(read_regular_file(p, 1024), Error);
  }
  EXPECT_THROW(LineReader(dir.path() / "missing", 1024), Error);
}

TEST(ReadRegularFile, ReadsTheWholeFileAndRefusesOneOverTheCap) {
  const testing::ScratchDir dir("input-file");
  const fs::path file = dir.path() / "summary.json";
  std::string text(300000, 'z');
  text[123456] = '\n';
  write(file, text);
  EXPECT_EQ(read_regular_file(file, text.size()), text);
  try {
    read_regular_file(file, text.size() - 1, "summary");
    FAIL() << "a file one byte over its cap was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos);
  }
}

}  // namespace
}  // namespace ampctl

namespace {
// VmSize of this process in bytes, read the way the kernel reports it (kB), independently of
// input_file.cpp's reader.
uint64_t vm_size_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmSize:") {
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}
}  // namespace

// Under ulimit -v the room is the limit less what the process maps already (before: the limit
// itself, so a process that had mapped most of its limit was told the whole limit was free).
TEST(HostMemory, AnAddressSpaceLimitCountsWhatTheProcessMaps) {
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_AS, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY) GTEST_SKIP() << "RLIMIT_AS has a hard limit here";
  const uint64_t used = vm_size_bytes();
  ASSERT_GT(used, 0u);
  const uint64_t room = uint64_t{64} << 20;
  struct rlimit tight = saved;
  tight.rlim_cur = used + room;
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &tight), 0);
  const std::optional<uint64_t> as = ampctl::address_space_available();
  const std::optional<uint64_t> host = ampctl::host_memory_available();
  const std::string name = ampctl::address_space_limit_name();
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &saved), 0);
  ASSERT_TRUE(as.has_value());
  // Reading /proc maps and frees a buffer or two: 1 MiB of slack either way, far below what the
  // process maps (the old answer, the limit itself, is that much larger).
  const uint64_t slack = uint64_t{1} << 20;
  ASSERT_GT(used, 4 * slack);
  EXPECT_LE(*as, room + slack);
  EXPECT_GE(*as, room - slack);
  ASSERT_TRUE(host.has_value());
  EXPECT_LE(*host, room + slack);
  EXPECT_EQ(name, "ulimit -v (RLIMIT_AS)");
}

// A thread's stack mapping: the default stack size (RLIMIT_STACK when it is finite) and a guard
// page.
TEST(HostMemory, AThreadStackIsTheDefaultStackAndItsGuardPage) {
  struct rlimit stack {};
  ASSERT_EQ(::getrlimit(RLIMIT_STACK, &stack), 0);
  const uint64_t bytes = ampctl::thread_stack_bytes();
  if (stack.rlim_cur != RLIM_INFINITY) {
    EXPECT_EQ(bytes, static_cast<uint64_t>(stack.rlim_cur) + 4096);
  } else {
    EXPECT_GT(bytes, 4096u);
  }
}
