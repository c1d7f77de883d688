// `ampctl tokenize --tokenizer PATH INPUT... --out FILE.bin [--dtype u16|u32] [--bos] [--eos]`:
// the token ids of text files (each INPUT is one document) through a byte-level BPE tokenizer
// (tokenize/tokenizer.h), written as nanoGPT's raw train.bin: little-endian uint16 when every id
// fits (vocabulary <= 65536), else uint32 (data.train's `format: u32` reads it). Each document is
// encoded as one string (in parallel pieces that give the same ids); no special token is added
// unless --bos (before each document) or --eos (after each) asks. A progress line on stderr, a
// summary on stdout. Bad input (tokenizer, UTF-8, a u16 dtype the vocabulary does not fit) is
// exit 2 before --out is written; --out accepts only a path the command may own (output_file.h).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ampctl/checkpoint/output_file.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/tokenize/tokenizer.h"
#include "commands.h"

namespace ampctl::app {

namespace {

// The biggest input file read (whole, into memory).
constexpr size_t kMaxInputBytes = size_t{1} << 34;

struct TokenizeOptions {
  std::string tokenizer;
  std::vector<std::string> inputs;
  std::string out;
  std::string dtype = "auto";
  bool bos = false, eos = false;
  int threads = 0;
};

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

int run_tokenize(const TokenizeOptions& options) {
  namespace fs = std::filesystem;
  if (options.dtype != "auto" && options.dtype != "u16" && options.dtype != "u32") {
    throw Error{ErrorKind::usage, "--dtype: '" + options.dtype + "' is not u16, u32 or auto"};
  }
  std::vector<fs::path> inputs(options.inputs.begin(), options.inputs.end());
  inputs.emplace_back(options.tokenizer);
  // The files a tokenizer path may read: its folder's (or, for a file, the folder around it).
  const fs::path folder = fs::is_directory(options.tokenizer)
                              ? fs::path(options.tokenizer)
                              : fs::path(options.tokenizer).parent_path();
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"}) {
    inputs.push_back(folder / name);
  }
  const fs::path out = checkpoint::checked_output_path(options.out, inputs, "--out");
  for (const std::string& input : options.inputs) require_regular_file(input, "text");

  const auto started = std::chrono::steady_clock::now();
  const tokenize::Tokenizer tokenizer = tokenize::Tokenizer::load(options.tokenizer);
  const bool u32 =
      options.dtype == "u32" || (options.dtype == "auto" && tokenizer.vocab_size() > 65536);
  if (!u32 && tokenizer.vocab_size() > 65536) {
    throw Error{ErrorKind::usage,
                "--dtype u16: the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                    " tokens, and uint16 holds ids below 65536",
                "use --dtype u32 (read back with format: u32)"};
  }
  const auto special = [&](bool wanted, std::optional<int32_t> id, const char* flag) {
    if (wanted && !id) {
      throw Error{ErrorKind::usage,
                  std::string(flag) + ": " + options.tokenizer + " names no " +
                      (flag[2] == 'b' ? "BOS" : "EOS") + " token",
                  "a tokenizer_config.json beside tokenizer.json may name it (bos_token, "
                  "eos_token)"};
    }
    return wanted ? id : std::nullopt;
  };
  const auto bos = special(options.bos, tokenizer.bos_id(), "--bos");
  const auto eos = special(options.eos, tokenizer.eos_id(), "--eos");
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool tty = isatty(STDERR_FILENO) != 0;

  std::string bytes;
  uint64_t text_bytes = 0, tokens = 0;
  double encode_seconds = 0;
  const auto put = [&](int32_t id) {
    const auto v = static_cast<uint32_t>(id);
    for (int k = 0; k < (u32 ? 4 : 2); ++k) bytes.push_back(static_cast<char>(v >> (8 * k)));
    ++tokens;
  };
  // At the peak a document is held as text, its pre-tokenized pieces and their ids: about 6
  // bytes per byte of ordinary text (measured), more for long runs without a split.
  const auto check_memory_for = [&](const std::string& input) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(input, ec);
    const std::optional<uint64_t> available = host_memory_available();
    if (ec || !available || size > kMaxInputBytes || size * 6 <= *available) return;
    throw Error{ErrorKind::input,
                "text " + input + ": " + format_bytes(size) + " need about " +
                    format_bytes(size * 6) +
                    " of memory to tokenize (the text, its pieces and their ids), and " +
                    format_bytes(*available) + " is available",
                "tokenize a smaller file, or free memory / raise the process's limit (ulimit -v)"};
  };
  const auto tokenize_one = [&](size_t d, const std::string& input) {
    const std::string text = read_regular_file(input, kMaxInputBytes, "text");
    auto last = std::chrono::steady_clock::now();
    const auto progress = [&](size_t done) {
      const auto now = std::chrono::steady_clock::now();
      if (!tty || now - last < std::chrono::milliseconds(250)) return;
      last = now;
      std::fprintf(stderr, "\rtokenize: document %zu/%zu, %s of %s", d + 1, options.inputs.size(),
                   mb(static_cast<double>(done)).c_str(),
                   mb(static_cast<double>(text.size())).c_str());
      std::fflush(stderr);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tokenizer.encode(text, input, threads, progress);
    encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bos) put(*bos);
    bytes.reserve(bytes.size() + ids.size() * (u32 ? 4 : 2));
    for (const int32_t id : ids) put(id);
    if (eos) put(*eos);
    text_bytes += text.size();
    std::fprintf(stderr, "%stokenize: %s: %s, %zu tokens\n", tty ? "\r\033[K" : "", input.c_str(),
                 mb(static_cast<double>(text.size())).c_str(), ids.size());
  };
  for (size_t d = 0; d < options.inputs.size(); ++d) {
    const std::string& input = options.inputs[d];
    check_memory_for(input);
    try {
      tokenize_one(d, input);
    } catch (const std::bad_alloc&) {
      throw Error{ErrorKind::runtime, "out of memory while tokenizing " + input,
                  "tokenize fewer or smaller files at a time, or free memory / raise the "
                  "process's limit (ulimit -v)"};
    }
  }

  checkpoint::write_output_file(out, bytes, "--out");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "wrote %s: %llu tokens (%s) from %zu document%s, %s of text; %s\n"
      "encoded in %.3f s (%.0f tokens/s, %.1f MB/s, %d thread%s); %.3f s in all\n",
      options.out.c_str(), static_cast<unsigned long long>(tokens), u32 ? "uint32" : "uint16",
      options.inputs.size(), options.inputs.size() == 1 ? "" : "s",
      mb(static_cast<double>(text_bytes)).c_str(), tokenizer.describe().c_str(), encode_seconds,
      encode_seconds > 0 ? static_cast<double>(tokens) / encode_seconds : 0.0,
      encode_seconds > 0 ? static_cast<double>(text_bytes) / 1e6 / encode_seconds : 0.0, threads,
      threads == 1 ? "" : "s", seconds);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "text files -> token ids through a BPE tokenizer (nanoGPT's train.bin)");
  sub->add_option("--tokenizer", options->tokenizer,
                  "a Hugging Face tokenizer.json, a folder holding one, or GPT-2's vocab.json "
                  "(merges.txt beside it)")
      ->required()
      ->type_name("PATH");
  sub->add_option("inputs", options->inputs, "UTF-8 text files, one document each")
      ->required()
      ->type_name("INPUT");
  sub->add_option("--out", options->out, "the token file to write (raw little-endian ids)")
      ->required()
      ->type_name("FILE.bin");
  sub->add_option("--dtype", options->dtype,
                  "u16 | u32 (default: u16 when the vocabulary fits, else u32)")
      ->type_name("TYPE");
  sub->add_flag("--bos", options->bos, "put the tokenizer's BOS token before each document");
  sub->add_flag("--eos", options->eos, "put the tokenizer's EOS token after each document");
  sub->add_option("--threads", options->threads,
                  "encoding threads (default: the machine's cores; the ids do not depend on it)")
      ->type_name("N")
      ->check(
          [](const std::string& v) -> std::string {
            int n = 0;
            const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec == std::errc{} && ptr == v.data() + v.size() && n >= 1 && n <= 4096) return {};
            return v + ": expected an integer N >= 1 (at most 4096)";
          },
          "N >= 1");
  commands.push_back({sub, [options] { return run_tokenize(*options); }});
}

}  // namespace ampctl::app
