// Helpers for the data tests: a temporary folder per test, IDX writers (plain and gzip, the
// format written independently of the reader: big-endian by hand), and error assertions.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "test_util.h"

namespace ampctl::data::testing {

using TempDir = ampctl::testing::ScratchDir;

inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// The bytes of an unsigned-byte idx file.
inline std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  for (uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_bytes(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << file;
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  write_bytes(file, std::vector<uint8_t>(text.begin(), text.end()));
}

// Gzip through zlib's gzwrite (the path .gz files on disk took).
inline void write_gz(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(file.c_str(), "wb");
  ASSERT_NE(f, nullptr) << file;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Seeded random bytes below `bound`.
inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, unsigned bound = 256) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng() % bound);
  return out;
}

// Runs `fn`, expecting Error{kind} whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind,
                         std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << "message: " << e.what();
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message '" << message << "' lacks '" << part << "'";
    }
  }
}

inline void expect_input_error(const std::function<void()>& fn,
                               std::initializer_list<std::string> parts) {
  expect_error(fn, ErrorKind::input, parts);
}

// Runs `fn` on hostile input: it may succeed or throw ampctl::Error, nothing else.
inline void expect_only_ampctl_errors(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-ampctl exception: " << e.what();
  }
}

}  // namespace ampctl::data::testing
