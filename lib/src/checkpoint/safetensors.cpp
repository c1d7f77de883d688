// safetensors export of a checkpoint's model tensors; see safetensors.h.
#include "ampctl/checkpoint/safetensors.h"

#include <algorithm>
#include <set>

#include "ampctl/build_info.h"
#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/core/error.h"

namespace ampctl::checkpoint {

namespace {

using ojson = nlohmann::ordered_json;

// The header must be 8-byte aligned so the data that follows is (the format's rule; readers
// that mmap the file rely on it).
constexpr size_t kHeaderAlign = 8;

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
  }
  throw Error{ErrorKind::invalid_argument, "safetensors: unknown dtype"};
}

std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    auto fail = [&](const std::string& problem) {
      return Error{ErrorKind::invalid_argument,
                   "safetensors export: tensor '" + t.name + "': " + problem};
    };
    if (t.name.empty()) throw fail("empty name");
    if (t.name == "__metadata__") throw fail("the name is reserved by the format");
    if (!names.insert(t.name).second) throw fail("duplicate name");
    const int64_t numel = t.numel();
    if (numel < 0 || static_cast<uint64_t>(numel) * dtype_size(t.dtype) != t.data.size()) {
      throw fail(std::to_string(t.data.size()) + " bytes of data for " + dtype_name(t.dtype) +
                 shape_str(t.shape));
    }
    const uint64_t end = offset + t.data.size();
    header[t.name] = {
        {"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string json = header.dump();
  json.append((kHeaderAlign - json.size() % kHeaderAlign) % kHeaderAlign, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  append_u64_le(out, json.size());
  out += json;
  for (const NamedTensor& t : tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  return out;
}

namespace {

// A GPT with a tied head keeps one tensor (transformer.wte.weight); nanoGPT's state_dict has the
// tied parameter under both keys, so the export writes it twice and GPT.load_state_dict accepts
// the file strictly (on torch < 2.0 its attention masks, buffers, are missing: strict=False).
bool tied_gpt(const CheckpointData& data) {
  const nlohmann::json& m =
      data.config.is_object() ? data.config.value("model", nlohmann::json{}) : nlohmann::json{};
  if (!m.is_object() || m.value("type", std::string()) != "gpt") return false;
  const auto tie = m.find("tie_embeddings");
  return tie == m.end() || (tie->is_boolean() && tie->get<bool>());
}

}  // namespace

std::string export_safetensors_bytes(const CheckpointData& data) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"ampctl_version", AMPCTL_VERSION}, {"step", std::to_string(data.step)}};
  if (tied_gpt(data)) {
    std::vector<NamedTensor> tensors = data.model;
    const auto has = [&](const char* name) {
      return std::any_of(tensors.begin(), tensors.end(),
                         [&](const NamedTensor& t) { return t.name == name; });
    };
    if (has("transformer.wte.weight") && !has("lm_head.weight")) {
      for (const NamedTensor& t : data.model) {
        if (t.name != "transformer.wte.weight") continue;
        NamedTensor head = t;
        head.name = "lm_head.weight";
        tensors.push_back(std::move(head));
      }
    }
    return encode_safetensors(tensors, metadata);
  }
  return encode_safetensors(data.model, metadata);
}

void export_safetensors(const CheckpointData& data, const std::filesystem::path& out) {
  write_file_atomic(out, export_safetensors_bytes(data));
}

}  // namespace ampctl::checkpoint
