// safetensors export: the layout checked here byte by byte, then the file read back by an
// independent reader (tests/cli/checkpoint_safetensors_check.py: Python's standard library
// only) and compared tensor by tensor with the checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/core/error.h"
#include "checkpoint_test_util.h"
#include "test_util.h"

namespace ampctl::checkpoint {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using testing::make_sample;
using testing::ScratchDir;

uint64_t read_u64_le(const std::string& bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

TEST(Safetensors, LayoutHeaderOffsetsAndData) {
  const CheckpointData d = make_sample(21, 5);
  const std::string file = encode_safetensors(d.model, {{"format", "pt"}, {"step", "5"}});
  const uint64_t n = read_u64_le(file);
  ASSERT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
  ASSERT_LE(8 + n, file.size());
  const std::string header_text = file.substr(8, n);
  EXPECT_EQ(header_text.front(), '{');
  EXPECT_EQ(header_text.find_last_not_of(' ') + 1, header_text.find_last_of('}') + 1)
      << "only spaces after the JSON";
  const ojson header = ojson::parse(header_text);
  EXPECT_EQ(header["__metadata__"], ojson({{"format", "pt"}, {"step", "5"}}));
  const std::string body = file.substr(8 + n);
  uint64_t end = 0;
  size_t i = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    ASSERT_LT(i, d.model.size());
    const NamedTensor& t = d.model[i++];
    EXPECT_EQ(name, t.name) << "tensors in checkpoint order";
    EXPECT_EQ(entry["dtype"], safetensors_dtype(t.dtype));
    EXPECT_EQ(entry["shape"], ojson(t.shape));
    const uint64_t begin = entry["data_offsets"][0], stop = entry["data_offsets"][1];
    EXPECT_EQ(begin, end) << name << ": tensors must be contiguous";
    end = stop;
    EXPECT_EQ(body.substr(begin, stop - begin),
              std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size()))
        << name;
  }
  EXPECT_EQ(i, d.model.size());
  EXPECT_EQ(end, body.size());
  EXPECT_STREQ(safetensors_dtype(DType::bf16), "BF16");
  EXPECT_STREQ(safetensors_dtype(DType::i32), "I32");
}

TEST(Safetensors, RefusesTensorsTheFormatCannotHold) {
  CheckpointData d = make_sample(1, 1);
  std::vector<NamedTensor> tensors = d.model;
  tensors.push_back(tensors[0]);
  EXPECT_THROW(encode_safetensors(tensors, {}), Error);
  tensors = d.model;
  tensors[0].name = "__metadata__";
  EXPECT_THROW(encode_safetensors(tensors, {}), Error);
  tensors = d.model;
  tensors[1].data.push_back(0);
  EXPECT_THROW(encode_safetensors(tensors, {}), Error);
}

TEST(Safetensors, DecodeReadsBackWhatEncodeWrote) {
  const CheckpointData d = make_sample(21, 5);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"vocab", "[\"a\"]"}};
  const SafetensorsFile f = decode_safetensors(encode_safetensors(d.model, meta), "x");
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), d.model.size());
  for (size_t i = 0; i < d.model.size(); ++i) {
    EXPECT_EQ(f.tensors[i], d.model[i]) << "tensor " << i << ": in data order, bytes intact";
  }
}

TEST(Safetensors, DecodeRefusesDamagedFilesNamingTheProblem) {
  const CheckpointData d = make_sample(3, 1);
  const std::string good = encode_safetensors(d.model, {});
  auto refused = [](const std::string& bytes, const std::string& needle) {
    try {
      decode_safetensors(bytes, "f.safetensors");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted a damaged file (" << needle << ")";
  };
  refused("", "too short");
  refused(good.substr(0, good.size() - 1), "outside");  // truncated data
  std::string big = good;
  big[6] = static_cast<char>(0x7f);  // a header longer than the file
  refused(big, "header claims");
  std::string nonjson = good;
  nonjson[8] = 'x';
  refused(nonjson, "not JSON");
  // A dtype this reader does not decode is refused unless skipped (Hugging Face's masks).
  auto with_dtype = [&](const std::string& dtype) {
    const std::string header =
        "{\"m\":{\"dtype\":\"" + dtype + "\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    std::string out;
    for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + std::string(2, '\0');
  };
  refused(with_dtype("BOOL"), "is not read");
  EXPECT_TRUE(decode_safetensors(with_dtype("BOOL"), "f", [](const std::string&) {
                return true;
              }).tensors.empty());
  refused(with_dtype("F32"), "bytes for F32");
}

std::string run_command(const std::string& command, int& status) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) {
    status = -1;
    return "popen failed";
  }
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  status = ::pclose(pipe);
  return out;
}

TEST(Safetensors, IndependentPythonReaderAgreesWithTheCheckpoint) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 not found: the independent safetensors reader was not run";
  }
  const fs::path script =
      fs::path(ampctl::testing::test_data_dir()) / ".." / "cli" / "checkpoint_safetensors_check.py";
  ASSERT_TRUE(fs::exists(script)) << script;
  ScratchDir run;
  const fs::path ckpt = write_checkpoint(run.path(), make_sample(31, 250), 1);
  const fs::path out = run.path() / "model.safetensors";
  export_safetensors(read_checkpoint(run.path()), out);

  const std::string command =
      "python3 '" + script.string() + "' '" + ckpt.string() + "' '" + out.string() + "'";
  int status = 0;
  const std::string output = run_command(command, status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("ok: 8 tensors"), std::string::npos) << output;
  std::printf("[  INFO    ] %s", output.c_str());

  // The reader can fail: one flipped byte in the last tensor's data must be caught.
  std::string bytes = read_file(out);
  bytes[bytes.size() - 2] ^= 0x40;
  write_file_atomic(out, bytes);
  const std::string damaged = run_command(command, status);
  EXPECT_NE(status, 0) << damaged;
  EXPECT_NE(damaged.find("FAIL: scalar: bytes differ"), std::string::npos) << damaged;
}

}  // namespace
}  // namespace ampctl::checkpoint
