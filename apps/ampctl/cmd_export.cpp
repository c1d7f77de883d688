// `ampctl export --checkpoint FILE --format safetensors --out FILE`: the model tensors of a
// checkpoint in the safetensors format (loadable by safetensors.torch.load_file), written
// atomically. A format other than safetensors is a usage error (exit 2); a damaged checkpoint
// an input error (exit 2). --out accepts only a path the command may own (output_file.h): never
// the checkpoint itself, a run's own files, a device, a FIFO or a directory (exit 2).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/output_file.h"
#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/core/error.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string format;
  std::string out;
};

int run_export(const ExportOptions& options) {
  if (options.format != "safetensors") {
    throw Error{ErrorKind::usage, "--format: unsupported export format '" + options.format + "'",
                "the only format is safetensors"};
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
  sub->add_option("--format", options->format, "the output format: safetensors")
      ->required()
      ->type_name("FORMAT");
  sub->add_option("--out", options->out, "the file to write")->required()->type_name("FILE");
  commands.push_back({sub, [options] { return run_export(*options); }});
}

}  // namespace ampctl::app
