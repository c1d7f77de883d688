// `ampctl export --checkpoint FILE --format safetensors --out FILE`: the model tensors of a
// checkpoint in the safetensors format (loadable by safetensors.torch.load_file), written
// atomically, with the vocabulary and input statistics in its metadata. `--format hf --out DIR`:
// a GPT checkpoint as a Hugging Face GPT-2 folder (checkpoint/hf_gpt2.h: config.json,
// model.safetensors, vocab.json; tokenizer.json, the run directory's copy, for a run on text read
// through a tokenizer). Another format is a usage error (exit 2); a damaged checkpoint
// an input error (exit 2). --out accepts only a path the command may own (output_file.h): never
// the checkpoint itself, a run's own files, a device, a FIFO; a file for safetensors, and for hf
// a new or empty directory, or one an earlier hf export wrote (its .ampctl-export mark, exit 2
// otherwise: a model folder ampctl did not write is never replaced).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/hf_gpt2.h"
#include "ampctl/checkpoint/output_file.h"
#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/run/layout.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string format;
  std::string out;
};

namespace fs = std::filesystem;

// data.train.tokenizer of a checkpoint's configuration, when it names one.
const nlohmann::json* tokenizer_said(const nlohmann::json& config) {
  const nlohmann::json* said = &config;
  for (const char* key : {"data", "train", "tokenizer"}) {
    said = said && said->is_object() && said->contains(key) ? &(*said)[key] : nullptr;
  }
  return said && said->is_string() && !said->get<std::string>().empty() ? said : nullptr;
}

// --out DIR of --format hf: new (in an existing folder), or an existing directory that is empty
// or holds only the files an hf export writes (an earlier export, replaced file by file).

// The file an hf export writes into its directory beside the model's, marking it as ampctl's:
// only a directory that holds it (or an empty one) is written into again, so a model folder
// that ampctl did not write (a download from the Hub with the same three file names) is never
// replaced.
constexpr const char* kHfExportMark = ".ampctl-export";
constexpr const char* kHfExportMarkText = "ampctl export --format hf\n";

// --out DIR of --format hf: new (in an existing folder), an existing empty directory, or one
// that an earlier hf export wrote (its mark, and only the files an export writes; replaced file
// by file). A run's or a sweep's directory is refused naming the run.
void check_hf_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
    if (!fs::is_directory(parent, ec)) {
      throw Error{ErrorKind::usage,
                  "--out " + dir.string() + ": the folder " + parent.string() + " does not exist"};
    }
    return;
  }
  if (!fs::is_directory(dir, ec)) {
    throw Error{ErrorKind::usage,
                "--out " + dir.string() + ": --format hf writes a directory, and this is a file",
                "name a new directory"};
  }
  if (run::is_run_directory(dir)) {
    throw Error{ErrorKind::usage,
                "--out " + dir.string() + ": holds a " + (run::holds_sweep(dir) ? "sweep" : "run") +
                    " (its own files would be replaced or mixed with the export's)",
                "name a new directory"};
  }
  bool empty = true;
  bool marked = false;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    empty = false;
    const std::string name = e.path().filename().string();
    if (name == kHfExportMark) {
      // Read as every input is (a regular file, capped): a FIFO here must not block.
      marked = read_regular_file(e.path(), 4096, "export mark") == kHfExportMarkText;
      continue;
    }
    if (name != "config.json" && name != "model.safetensors" && name != "vocab.json" &&
        name != "tokenizer.json") {
      throw Error{ErrorKind::usage,
                  "--out " + dir.string() + " holds " + name +
                      ": --format hf writes only into a new or empty directory (or over an "
                      "earlier hf export)",
                  "name a new directory"};
    }
  }
  if (ec) throw Error{ErrorKind::usage, "--out " + dir.string() + ": " + ec.message()};
  if (!empty && !marked) {
    throw Error{ErrorKind::usage,
                "--out " + dir.string() +
                    ": holds a model that ampctl's export did not write (no " + kHfExportMark +
                    "); it is not replaced",
                "name a new directory, or empty this one if you mean to replace it"};
  }
}

int run_export_hf(const ExportOptions& options) {
  const fs::path dir = options.out;
  check_hf_dir(dir);
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(options.checkpoint);
  const checkpoint::HfExport out = checkpoint::hf_export(loaded.data);
  std::error_code ec;
  fs::create_directory(dir, ec);
  if (ec) throw Error{ErrorKind::usage, "--out " + dir.string() + ": " + ec.message()};
  const std::vector<fs::path> inputs = {options.checkpoint, loaded.path};
  auto write = [&](const char* name, const std::string& bytes) {
    const fs::path path = checkpoint::checked_output_path(dir / name, inputs, "--out");
    checkpoint::write_output_file(path, bytes, "--out");
  };
  // The mark first: a directory left half written is still recognised as this command's own.
  write(kHfExportMark, kHfExportMarkText);
  // A run on text read through a tokenizer: its copy (RUN/tokenizer.json) goes with the weights.
  std::string tokenizer_json;
  if (const nlohmann::json* said = tokenizer_said(loaded.data.config)) {
    const fs::path copy = loaded.path.parent_path().parent_path() / "tokenizer.json";
    if (!fs::exists(copy)) {
      throw Error{ErrorKind::input,
                  loaded.path.string() + ": the run read its text through a tokenizer, and " +
                      copy.string() + " (the run's copy of it) is missing",
                  "copy the tokenizer (" + said->get<std::string>() + ") there as tokenizer.json"};
    }
    tokenizer_json = read_regular_file(copy, size_t{1} << 30, "tokenizer");
  }
  write("config.json", out.config_json);
  write("model.safetensors", out.model_safetensors);
  if (!out.vocab_json.empty()) write("vocab.json", out.vocab_json);
  if (!tokenizer_json.empty()) write("tokenizer.json", tokenizer_json);
  std::printf(
      "wrote %s: config.json, model.safetensors%s%s (Hugging Face GPT-2; step %lld of %s)\n",
      options.out.c_str(), out.vocab_json.empty() ? "" : ", vocab.json",
      tokenizer_json.empty() ? "" : ", tokenizer.json", static_cast<long long>(loaded.data.step),
      loaded.path.string().c_str());
  return 0;
}

int run_export(const ExportOptions& options) {
  if (options.format == "hf") return run_export_hf(options);
  if (options.format != "safetensors") {
    throw Error{ErrorKind::usage, "--format: unsupported export format '" + options.format + "'",
                "the formats are safetensors and hf"};
  }
  // Checked before the (possibly large) checkpoint is read, and again against the file chosen
  // when --checkpoint names a run directory.
  checkpoint::checked_output_path(options.out, {options.checkpoint}, "--out");
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(options.checkpoint);
  const std::filesystem::path out =
      checkpoint::checked_output_path(options.out, {options.checkpoint, loaded.path}, "--out");
  checkpoint::write_output_file(out, checkpoint::export_safetensors_bytes(loaded.data), "--out");
  int64_t parameters = 0;
  for (const checkpoint::NamedTensor& t : loaded.data.model) parameters += t.numel();
  std::printf("wrote %s: %zu tensors, %lld parameters (step %lld of %s)\n", options.out.c_str(),
              loaded.data.model.size(), static_cast<long long>(parameters),
              static_cast<long long>(loaded.data.step), loaded.path.string().c_str());
  return 0;
}

}  // namespace

void register_export(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* sub =
      app.add_subcommand("export", "write a checkpoint's model tensors in another format");
  sub->add_option("--checkpoint", options->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint)")
      ->required()
      ->type_name("FILE");
  sub->add_option("--format", options->format,
                  "the output format: safetensors (one file) | hf (a Hugging Face GPT-2 directory)")
      ->required()
      ->type_name("FORMAT");
  sub->add_option("--out", options->out, "the file to write (--format hf: the directory)")
      ->required()
      ->type_name("PATH");
  commands.push_back({sub, [options] { return run_export(*options); }});
}

}  // namespace ampctl::app
