// Export of a checkpoint's model tensors in the safetensors format (huggingface/safetensors),
// readable by safetensors.torch.load_file and any reader of the format.
//
// Layout: an 8-byte little-endian u64 N; N bytes of a JSON header {"__metadata__": {string:
// string}, NAME: {"dtype": "F32"|"F16"|"BF16"|"I32", "shape": [...], "data_offsets": [begin,
// end]}, ...} padded with spaces to a multiple of 8 (so the data that follows stays 8-byte
// aligned); then the tensors' raw little-endian bytes, contiguous, in header order, offsets
// relative to the start of the data.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"

namespace ampctl::checkpoint {

// "F32", "F16", "BF16", "I32".
const char* safetensors_dtype(DType dtype);

// The whole file's bytes. Throws Error{invalid_argument} for an empty or duplicate name, the
// reserved name "__metadata__", or a tensor whose byte count disagrees with its shape.
std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// The bytes export_safetensors writes (for a caller that checks and writes the file itself).
std::string export_safetensors_bytes(const CheckpointData& data);

// A safetensors file as read: its tensors in header order of their data offsets, and its
// `__metadata__` (string to string; empty when absent).
struct SafetensorsFile {
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses a whole safetensors file. `origin` (the file) starts every message. Tensors for which
// `skip(name)` is true are checked for sane offsets but not decoded (their dtype may then be any
// of the format's: a Hugging Face GPT-2 file's boolean attn.bias masks). Throws Error{input} for
// a file shorter than its header, a header that is not a JSON object, a tensor of an unsupported
// dtype ("F32", "F16", "BF16", "I32" are read), a shape whose byte count disagrees with its
// offsets, offsets outside the data or overlapping, or a duplicate name.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& origin,
                                   const std::function<bool(const std::string&)>& skip = {});

// Writes the model tensors of `data` to `out` atomically, with metadata {"format": "pt",
// "ampctl_version", "step"}. Throws Error{runtime} on I/O failure.
void export_safetensors(const CheckpointData& data, const std::filesystem::path& out);

}  // namespace ampctl::checkpoint
