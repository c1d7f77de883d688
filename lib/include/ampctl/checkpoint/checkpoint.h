// The checkpoint document (docs/reference.md, "Checkpoints") and the checkpoints/ folder of a run
// directory.
//
// A checkpoint is one JSON document: the format tag and version, the step, the resolved
// configuration, the scaler's state_dict (PyTorch's keys and types, `{}` when disabled), the
// model's tensors, the optimizer's state (JSON plus its tensors), the scheduler, RNG, data
// loader and metrics state. Each tensor is stored as {"dtype", "shape", "data": base64 of its
// little-endian bytes, "crc32": of those bytes}, so a damaged file is refused, never loaded.
//
// Invariants:
//  - serialize is deterministic: the same CheckpointData gives byte-identical text. Top-level
//    keys are in the order of docs/reference.md, "Checkpoints", tensors in the order of the
//    vectors, every other object's keys sorted (nlohmann::json's order); parse_checkpoint keeps the
//    tensor order, so serialize(parse_checkpoint(serialize(d))) == serialize(d).
//  - parse_checkpoint accepts only what serialize can produce (plus any JSON in the free-form
//    sections) and throws Error{input} "ORIGIN: WHAT IS WRONG" for anything else.
//  - In a run directory, checkpoints/latest names (file name + "\n") a complete checkpoint
//    whenever it exists: the checkpoint is written (atomically) before latest is (atomically).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/core/tensor.h"

namespace ampctl::checkpoint {

inline constexpr const char* kFormat = "ampctl-checkpoint";
inline constexpr int64_t kVersion = 1;  // the only version this build reads and writes

// One tensor as stored: raw bytes in little-endian order (the host's; see from_host_tensor).
// Invariant (checked by serialize and parse_checkpoint): data.size() == numel(shape) *
// dtype_size(dtype), every dimension >= 0.
struct NamedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<uint8_t> data;

  int64_t numel() const { return shape_numel(shape); }
  bool operator==(const NamedTensor&) const = default;
};

// A copy of a host tensor's bytes (Error{invalid_argument} for a device tensor: download first).
NamedTensor from_host_tensor(std::string name, const Tensor& host);
// A new host tensor holding the bytes.
Tensor to_host_tensor(const NamedTensor& tensor);

struct CheckpointData {
  int64_t step = 0;  // optimizer steps completed, >= 0
  // config::to_json of the resolved configuration. Every JSON section is an object ({} by
  // default); serialize refuses anything else.
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json scaler =
      nlohmann::json::object();  // GradScaler::state_dict(): PyTorch's keys, or {}
  std::vector<NamedTensor> model;
  std::vector<NamedTensor> optimizer_tensors;  // stored as optimizer.tensors
  nlohmann::json optimizer =
      nlohmann::json::object();  // without a "tensors" key (that one is ours)
  nlohmann::json scheduler = nlohmann::json::object();  // free-form
  nlohmann::json rng = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();
  nlohmann::json metrics = nlohmann::json::object();  // may hold "last_loss" (ampctl inspect)
  // A language model's vocabulary on text data: the tokens' strings in id order (data/vocab.h),
  // stored as the top-level "vocab" after "metrics"; null (the key left out) for other runs.
  nlohmann::json vocab;
  // The input statistics of a run with data.normalize (data/dataset.h, Normalization), stored as
  // the top-level "input" after "vocab": {"mean": [f doubles], "std": [f doubles], "pixel_scale":
  // 255 for pixel data, else 1}; a feature x is fed as (x / pixel_scale - mean) / std', std' =
  // std, or 1 where std < 1e-6. Null (the key left out) for other runs and older checkpoints.
  nlohmann::json input;

  bool operator==(const CheckpointData&) const = default;
};

// The JSON text (ends with a newline). Throws Error{invalid_argument} for data that would not
// parse back: a negative step, a non-object section, a tensor whose byte count disagrees with
// its shape, an empty or duplicate tensor name, "tensors" inside `optimizer`.
std::string serialize(const CheckpointData& data);

// Validates and decodes a checkpoint; `origin` (the file) starts every error message.
// Throws Error{input}: empty file, not JSON, truncated JSON, wrong "format", unsupported
// "version", JSON nested deeper than 128 levels, a missing or unknown top-level key, a section of
// the wrong type, a scaler with a missing key or a value of the wrong type, a tensor with a bad
// dtype, shape, base64, byte count or crc32.
CheckpointData parse_checkpoint(std::string_view text, const std::string& origin);

// A tensor of a checkpoint that parse_checkpoint would refuse for its values (a non-finite
// parameter, buffer or optimizer moment, a negative variance, a step counter out of range).
struct StateProblem {
  std::string section;  // "model" or "optimizer"
  std::string tensor;
  std::string problem;  // "element 3 is nan: not finite"
};
// Every such tensor of `data`, in order: what a writer checks first, so that it never writes a
// checkpoint that no command would load (train/trainer.h: the run ends as diverged instead).
std::vector<StateProblem> state_problems(const CheckpointData& data);

// "step-00000100.json" (at least 8 digits; more for steps past 99,999,999).
std::string checkpoint_file_name(int64_t step);

// Writes RUN_DIR/checkpoints/step-NNNNNNNN.json atomically, then RUN_DIR/checkpoints/latest
// atomically, then removes older step-*.json beyond the `keep_last` (>= 1) newest by step,
// never the one latest names, and any temporary file a killed write left (one whose writer is
// gone: temporary_file_orphaned, never a live process's). Returns the
// checkpoint's path. Throws Error{runtime} on I/O failure (the previous checkpoint and latest
// are then intact) and Error{invalid_argument} for keep_last < 1 or data serialize refuses.
// `keep`: file names never removed and not counted in keep_last (checkpoint.keep_best's);
// `removed`, when given, receives the files pruned.
std::filesystem::path write_checkpoint(const std::filesystem::path& run_dir,
                                       const CheckpointData& data, int64_t keep_last,
                                       const std::vector<std::string>& keep = {},
                                       std::vector<std::filesystem::path>* removed = nullptr);

// Copies the checkpoint `file` (its bytes, unchanged) into RUN_DIR/checkpoints under its step's
// name, atomically, then RUN_DIR/checkpoints/latest naming it: a branch of another run
// (`ampctl resume --run-dir`) starts from it. Returns the new file's path; Error{runtime} on I/O
// failure.
std::filesystem::path adopt_checkpoint(const std::filesystem::path& run_dir,
                                       const std::filesystem::path& file, int64_t step);

// The checkpoint a user means by `path`:
//  - a file: itself (read_checkpoint verifies it);
//  - a run directory (or its checkpoints/ folder): the file checkpoints/latest names if it
//    parses and verifies, else the newest step-*.json that does (with an spdlog warning saying
//    why latest was passed over).
// Throws Error{input} "no complete checkpoint in DIR" (the hint lists what was wrong with each
// candidate) or "PATH: no such file or directory".
std::filesystem::path find_checkpoint(const std::filesystem::path& path);

struct LoadedCheckpoint {
  std::filesystem::path path;  // the file actually read
  CheckpointData data;
};

// The step-*.json files in `checkpoints_dir` whose step is above `step`, lowest step first (a run
// directory's history after that step: resume refuses to replace it unawares). Not verified.
std::vector<std::filesystem::path> checkpoints_after(const std::filesystem::path& checkpoints_dir,
                                                     int64_t step);

// find_checkpoint + parse_checkpoint, reading and verifying the chosen file once.
LoadedCheckpoint load_checkpoint(const std::filesystem::path& path);
// load_checkpoint(path).data.
CheckpointData read_checkpoint(const std::filesystem::path& path);

// What `ampctl inspect` shows, as one JSON object: "file", "step", "scaler_enabled", "scale",
// "growth_tracker" (null when the scaler is disabled), "last_loss" (when metrics has it),
// "parameters" (sum of the model tensors' numels), "precision" (config.precision, or null),
// "optimizer_tensors" (their count), "tensors": [{"name", "dtype", "shape", "numel"}, ...].
nlohmann::ordered_json summarize(const CheckpointData& data, const std::filesystem::path& file);

}  // namespace ampctl::checkpoint
