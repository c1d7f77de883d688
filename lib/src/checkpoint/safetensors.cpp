// safetensors export of a checkpoint's model tensors; see safetensors.h.
#include "ampctl/checkpoint/safetensors.h"

#include <algorithm>
#include <optional>
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

namespace {

// input.mean / input.std as F32 tensors [features] for PyTorch: (x / pixel_scale - mean) / std,
// std already the divisor applied (1 where the training std was below 1e-6).
std::vector<NamedTensor> input_tensors(const nlohmann::json& input) {
  std::vector<NamedTensor> out;
  if (input.is_null()) return out;
  for (const char* key : {"mean", "std"}) {
    NamedTensor t;
    t.name = std::string("input.") + key;
    t.dtype = DType::f32;
    t.shape = Shape{static_cast<int64_t>(input[key].size())};
    for (const nlohmann::json& x : input[key]) {
      double v = x.get<double>();
      if (std::string(key) == "std" && v < 1e-6) v = 1.0;
      const auto f = static_cast<float>(v);
      const auto* b = reinterpret_cast<const uint8_t*>(&f);
      t.data.insert(t.data.end(), b, b + sizeof f);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::string export_safetensors_bytes(const CheckpointData& data) {
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"ampctl_version", AMPCTL_VERSION}, {"step", std::to_string(data.step)}};
  // What --init-from, eval and people need beside the weights: the vocabulary of a text run, and
  // the exact (double) input statistics of a run with data.normalize (also as tensors, in f32).
  if (!data.vocab.is_null()) metadata["vocab"] = data.vocab.dump();
  if (!data.input.is_null()) metadata["input"] = data.input.dump();
  // The model's structure (model.*: n_head, activation, ...), which the tensors' shapes do not
  // all show: --init-from and eval compare it with the model they load into.
  if (data.config.is_object() && data.config.contains("model") &&
      data.config["model"].is_object()) {
    metadata["model"] = data.config["model"].dump();
  }
  std::vector<NamedTensor> tensors = data.model;
  if (tied_gpt(data)) {
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
  }
  for (NamedTensor& t : input_tensors(data.input)) tensors.push_back(std::move(t));
  return encode_safetensors(tensors, metadata);
}

namespace {

std::optional<DType> dtype_of_safetensors(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  return std::nullopt;
}

// The byte count of one element of any of the format's dtypes (0: not one of them).
uint64_t safetensors_element_bytes(const std::string& name) {
  if (name == "BOOL" || name == "U8" || name == "I8" || name == "F8_E4M3" || name == "F8_E5M2")
    return 1;
  if (name == "F16" || name == "BF16" || name == "I16" || name == "U16") return 2;
  if (name == "F32" || name == "I32" || name == "U32") return 4;
  if (name == "F64" || name == "I64" || name == "U64") return 8;
  return 0;
}

}  // namespace

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& origin,
                                   const std::function<bool(const std::string&)>& skip) {
  auto fail = [&](const std::string& problem) {
    return Error{ErrorKind::input, origin + ": " + problem,
                 "expected a safetensors file (8-byte header length, JSON header, data)"};
  };
  if (bytes.size() < 8) throw fail("too short for a safetensors file");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i)
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (header_len > bytes.size() - 8) {
    throw fail("the header claims " + std::to_string(header_len) + " bytes, the file holds " +
               std::to_string(bytes.size() - 8) + " after the length");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_len));
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("the header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");
  const std::string_view data = bytes.substr(8 + header_len);
  SafetensorsFile out;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw fail("__metadata__." + m.key() + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& problem) {
      return fail("tensor '" + name + "': " + problem);
    };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      throw bad("needs \"dtype\", \"shape\" and two \"data_offsets\"");
    }
    const std::string dtype = v["dtype"].get<std::string>();
    const uint64_t element = safetensors_element_bytes(dtype);
    if (element == 0) throw bad("unknown dtype " + dtype);
    if (v["shape"].size() > Shape::kMaxRank) throw bad("more than 6 dimensions");
    Shape shape;
    uint64_t numel = 1;
    for (const nlohmann::json& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
        throw bad("a dimension is not an integer in [0, 2^40]");
      }
      shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t{1} << 40)) throw bad("more than 2^40 elements");
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw bad("data_offsets are not non-negative integers");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data.size()) {
      throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                "] outside the " + std::to_string(data.size()) + " bytes of data");
    }
    if (end - begin != numel * element) {
      throw bad(std::to_string(end - begin) + " bytes for " + dtype + " " + shape_str(shape));
    }
    spans.push_back({begin, end, name});
    if (skip && skip(name)) continue;
    const std::optional<DType> t = dtype_of_safetensors(dtype);
    if (!t) throw bad("dtype " + dtype + " is not read (F32, F16, BF16 or I32)");
    NamedTensor nt;
    nt.name = name;
    nt.dtype = *t;
    nt.shape = shape;
    nt.data.assign(reinterpret_cast<const uint8_t*>(data.data() + begin),
                   reinterpret_cast<const uint8_t*>(data.data() + end));
    out.tensors.push_back(std::move(nt));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end && spans[i].end > spans[i].begin) {
      throw fail("tensors '" + spans[i - 1].name + "' and '" + spans[i].name + "' overlap");
    }
  }
  // Header order is JSON's (sorted names here): put the tensors in the order of their data, the
  // order the writer chose.
  std::map<std::string, uint64_t> begin_of;
  for (const Span& sp : spans) begin_of[sp.name] = sp.begin;
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [&](const NamedTensor& a, const NamedTensor& b) {
                     return begin_of[a.name] < begin_of[b.name];
                   });
  return out;
}

void export_safetensors(const CheckpointData& data, const std::filesystem::path& out) {
  write_file_atomic(out, export_safetensors_bytes(data));
}

}  // namespace ampctl::checkpoint
