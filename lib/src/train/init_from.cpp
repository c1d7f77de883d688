// init.from: reading a source of weights and matching it to a model; see init_from.h.
#include "ampctl/train/init_from.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/hf_gpt2.h"
#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/core/error.h"
#include "ampctl/core/half.h"
#include "ampctl/core/input_file.h"
#include "ampctl/nn/model.h"

namespace ampctl::train {

namespace fs = std::filesystem;
using checkpoint::NamedTensor;

namespace {

// The largest weights file read whole (GPT-2 xl in f32 is 6.4 GB).
constexpr size_t kMaxWeightsBytes = size_t{64} << 30;
constexpr int64_t kVocabMultiple = 64;

std::vector<float> as_f32(const NamedTensor& t);

std::string describe(const NamedTensor& t) {
  return t.name + " " + shape_str(t.shape);
}

nlohmann::json metadata_json(const std::map<std::string, std::string>& metadata, const char* key,
                             const std::string& origin) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  try {
    return nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception&) {
    throw Error{ErrorKind::input, origin + ": __metadata__." + key + " is not JSON text"};
  }
}

// A vocab.json next to a model.safetensors: tokenizers' {token: id} or ampctl's array.
nlohmann::json read_vocab_file(const fs::path& path) {
  const std::string text = read_regular_file(path, size_t{64} << 20, "vocabulary");
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error{ErrorKind::input, path.string() + ": not JSON: " + e.what()};
  }
  if (v.is_array()) return v;
  if (!v.is_object()) {
    throw Error{ErrorKind::input, path.string() + ": expected {token: id} or an array of tokens"};
  }
  std::vector<std::string> by_id(v.size());
  std::vector<bool> seen(v.size(), false);
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= v.size() ||
        seen[it.value().get<size_t>()]) {
      throw Error{ErrorKind::input, path.string() + ": token '" + it.key() +
                                        "' has no distinct id in [0, " + std::to_string(v.size()) +
                                        ")"};
    }
    seen[it.value().get<size_t>()] = true;
    by_id[it.value().get<size_t>()] = it.key();
  }
  return by_id;
}

InitSource from_checkpoint(const fs::path& path) {
  checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(path);
  InitSource s;
  s.file = loaded.path;
  s.format = "ampctl checkpoint";
  s.tensors = std::move(loaded.data.model);
  s.vocab = std::move(loaded.data.vocab);
  s.input = std::move(loaded.data.input);
  if (loaded.data.config.contains("model") && loaded.data.config["model"].is_object()) {
    s.model = loaded.data.config["model"];
    s.model_origin = loaded.path.string();
  }
  return s;
}

// A Hugging Face folder's config.json: what ampctl's GPT cannot compute refused (another
// LayerNorm epsilon, another GELU, other attention scaling), the shape keys kept as model keys
// for check_init_structure.
nlohmann::json hf_structure(const fs::path& file) {
  const std::string text = read_regular_file(file, size_t{1} << 20, "model configuration");
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error{ErrorKind::input, file.string() + ": not JSON: " + e.what()};
  }
  if (!c.is_object()) throw Error{ErrorKind::input, file.string() + ": expected a JSON object"};
  const auto refuse = [&](const std::string& what) {
    throw Error{ErrorKind::input, file.string() + ": " + what,
                "ampctl's GPT is GPT-2's: LayerNorm epsilon 1e-5, the tanh GELU (gelu_new), "
                "attention scaled by 1/sqrt(head size) only"};
  };
  if (c.contains("layer_norm_epsilon")) {
    const nlohmann::json& e = c["layer_norm_epsilon"];
    if (!e.is_number() || static_cast<float>(e.get<double>()) != 1e-5f) {
      refuse("layer_norm_epsilon is " + e.dump() + ", and ampctl's GPT normalises with 1e-05");
    }
  }
  if (c.contains("activation_function")) {
    const nlohmann::json& a = c["activation_function"];
    if (!a.is_string() || (a != "gelu_new" && a != "gelu_pytorch_tanh")) {
      refuse("activation_function is " + a.dump() +
             ", and ampctl's GPT computes the tanh GELU (gelu_new)");
    }
  }
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] != true) {
    refuse("scale_attn_weights is " + c["scale_attn_weights"].dump() +
           ", and ampctl's GPT scales the attention scores");
  }
  if (c.contains("scale_attn_by_inverse_layer_idx") &&
      c["scale_attn_by_inverse_layer_idx"] != false) {
    refuse("scale_attn_by_inverse_layer_idx is " + c["scale_attn_by_inverse_layer_idx"].dump() +
           ", and ampctl's GPT does not scale by the layer");
  }
  nlohmann::json model = {{"type", "gpt"}};
  for (const char* key : {"n_head", "n_layer", "n_embd"}) {
    if (c.contains(key)) model[key] = c[key];
  }
  return model;
}

// Weights that no run can train from or evaluate: a non-finite value (a diverged run's
// export, a damaged file) would surface later as a "divergence".
void check_finite(const InitSource& s) {
  for (const NamedTensor& t : s.tensors) {
    if (t.dtype == DType::i32) continue;
    const std::vector<float> v = as_f32(t);
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v[i])) continue;
      throw Error{ErrorKind::input,
                  "init.from " + s.file.string() + ": tensor " + t.name + ": element " +
                      std::to_string(i) + " is " +
                      (std::isnan(v[i]) ? "nan"
                       : v[i] > 0       ? "inf"
                                        : "-inf") +
                      ": the weights must be finite",
                  "start from weights of a run that had not diverged (an earlier checkpoint)"};
    }
  }
}

InitSource from_safetensors(const fs::path& file) {
  const std::string bytes = read_regular_file(file, kMaxWeightsBytes, "weights file");
  InitSource s;
  s.file = file;
  // Which layout: ampctl's exports say so in their metadata; any other file is read as Hugging
  // Face's. (No ampctl tensor name ends in .attn.bias, so the skip drops only Hugging Face's
  // masks.)
  checkpoint::SafetensorsFile f =
      checkpoint::decode_safetensors(bytes, file.string(), checkpoint::hf_ignored_buffer);
  if (f.metadata.count("ampctl_version") != 0) {
    s.format = "ampctl safetensors";
    for (NamedTensor& t : f.tensors) {
      if (t.name == "input.mean" || t.name == "input.std") continue;
      s.tensors.push_back(std::move(t));
    }
    s.vocab = metadata_json(f.metadata, "vocab", file.string());
    s.input = metadata_json(f.metadata, "input", file.string());
    s.model = metadata_json(f.metadata, "model", file.string());
    if (!s.model.is_null()) s.model_origin = file.string();
    return s;
  }
  s.format = "Hugging Face GPT-2 safetensors";
  std::error_code ec;
  if (const fs::path config = file.parent_path() / "config.json"; fs::exists(config, ec)) {
    s.model = hf_structure(config);
    s.model_origin = config.string();
  }
  for (NamedTensor& t : f.tensors) {
    t.name = checkpoint::hf_to_ampctl_name(t.name);
    s.tensors.push_back(checkpoint::hf_conv1d_weight(t.name) && t.shape.size() == 2
                            ? checkpoint::transpose_2d(t)
                            : std::move(t));
  }
  return s;
}

bool looks_like_checkpoint(const fs::path& file) {
  // A checkpoint is JSON text ('{' first); a safetensors file starts with its header's length.
  std::ifstream in(file, std::ios::binary);
  return in.get() == '{';
}

// The values of `t` as f32 (exact: f16 and bf16 widen without rounding).
std::vector<float> as_f32(const NamedTensor& t) {
  const auto n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const uint8_t* p = t.data.data();
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    switch (t.dtype) {
      case DType::f32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case DType::f16:
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_bits_to_float(h);
        break;
      case DType::bf16:
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_bits_to_float(h);
        break;
      case DType::i32:
        throw Error{ErrorKind::invalid_argument, "as_f32: an integer tensor"};
    }
  }
  return out;
}

bool all_zero(const NamedTensor& t) {
  if (t.dtype == DType::i32) return false;
  const std::vector<float> v = as_f32(t);
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

}  // namespace

namespace {

// A missing source: config paths and command-line paths are read from different folders
// (docs/reference.md, "Paths"), and a run trained in another directory is the usual cause; a
// run of the same name under the current directory's runs/ is named.
[[noreturn]] void missing_source(const fs::path& path) {
  std::string hint =
      "a relative init.from in a config file is read from that file's folder, --init-from and "
      "--set paths from the current directory (docs/reference.md, \"Paths\")";
  std::error_code ec;
  const fs::path here = fs::path("runs") / path.filename();
  if (!path.filename().empty() && fs::exists(here, ec)) {  // not `path`: that one is missing
    hint = "the current directory's " + here.string() + " holds it: --init-from " + here.string() +
           "; " + hint;
  }
  throw Error{ErrorKind::input, "init.from " + path.string() + ": no such file or directory", hint};
}

}  // namespace

InitSource read_init_source(const fs::path& path) {
  std::error_code ec;
  InitSource s;
  if (!fs::exists(fs::symlink_status(path, ec)) && !fs::exists(path, ec)) missing_source(path);
  if (fs::is_directory(path, ec)) {
    const fs::path st = path / "model.safetensors";
    if (fs::exists(st, ec)) {
      s = from_safetensors(st);
      const fs::path vocab = path / "vocab.json";
      if (s.vocab.is_null() && fs::exists(vocab, ec)) s.vocab = read_vocab_file(vocab);
    } else {
      s = from_checkpoint(path);
    }
  } else {
    require_regular_file(path, "init.from");
    s = looks_like_checkpoint(path) ? from_checkpoint(path) : from_safetensors(path);
  }
  check_finite(s);
  return s;
}

std::string structure_mismatch(const nlohmann::json& recorded, const nlohmann::json& model,
                               const std::string& origin) {
  if (!recorded.is_object() || !model.is_object()) return {};
  const std::string type = model.value("type", std::string());
  // Another kind of model shares no tensor with this one: load_init_weights says so.
  if (recorded.contains("type") && recorded["type"] != type) return {};
  std::vector<const char*> keys;
  if (type == "gpt") keys.insert(keys.end(), {"n_head", "n_layer", "n_embd"});
  if (type == "mlp") keys.insert(keys.end(), {"hidden", "activation", "layer_norm"});
  if (type == "cnn") {
    keys.insert(keys.end(), {"hidden", "activation", "conv", "pool", "batch_norm"});
  }
  for (const char* key : keys) {
    if (!recorded.contains(key) || !model.contains(key) || recorded[key] == model[key]) continue;
    return origin + " records model." + key + ": " + recorded[key].dump() +
           ", and the model has model." + key + ": " + model[key].dump() +
           " (weights of one structure compute another function in the other)";
  }
  return {};
}

void check_init_structure(const InitSource& source, const nlohmann::json& model) {
  const std::string message = structure_mismatch(
      source.model, model,
      "init.from " + (source.model_origin.empty() ? source.file.string() : source.model_origin));
  if (message.empty()) return;
  throw Error{ErrorKind::input, message,
              "give the model the weights' structure (--set model.KEY=VALUE as recorded)"};
}

namespace {

// A GPT's tensor whose rows differ from the model's in the two ways a checkpoint of another run
// may: the position embedding cropped to a shorter block_size, or the embedding or head padded
// to the vocabulary's multiple of kVocabMultiple with their mean row (each said in
// report.adapted). The tensor's values as the model needs them, or nothing for another misfit.
std::optional<std::vector<float>> crop_or_pad(const std::string& name, const NamedTensor& source,
                                              const Tensor& target, InitReport& report) {
  const NamedTensor* s = &source;
  const Tensor& t = target;
  const bool matrix = s->shape.size() == 2 && t.shape().size() == 2 && s->shape[1] == t.dim(1);
  const int64_t have = matrix ? s->shape[0] : 0, need = matrix ? t.dim(0) : 0;
  const bool crop = matrix && name == "transformer.wpe.weight" && have > need;
  const bool pad = matrix && (name == "transformer.wte.weight" || name == "lm_head.weight") &&
                   have < need &&
                   need == (have + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
  if (!crop && !pad) return std::nullopt;
  std::vector<float> v = as_f32(*s);
  const auto cols = static_cast<size_t>(t.dim(1));
  if (crop) {
    v.resize(static_cast<size_t>(need) * cols);
    report.adapted.push_back(name + ": the first " + std::to_string(need) + " of " +
                             std::to_string(have) + " positions (block_size crop)");
  } else {
    // The mean row, in double over the rows in order, rounded once.
    std::vector<double> mean(cols, 0.0);
    for (int64_t r = 0; r < have; ++r) {
      for (size_t c = 0; c < cols; ++c) mean[c] += v[static_cast<size_t>(r) * cols + c];
    }
    for (int64_t r = have; r < need; ++r) {
      for (size_t c = 0; c < cols; ++c) {
        v.push_back(static_cast<float>(mean[c] / static_cast<double>(have)));
      }
    }
    report.adapted.push_back(name + ": " + std::to_string(have) + " rows padded to " +
                             std::to_string(need) + " with their mean row");
  }
  return v;
}

// The file's tensors that the model does not use, into report.unexpected; but not a tied
// model's head that is the embedding, nor the zero biases of a bias-free GPT's export (said in
// one line of report.adapted).
void list_unexpected(const InitSource& source,
                     const std::map<std::string, const NamedTensor*>& by_name,
                     const std::set<std::string>& used, const std::set<std::string>& target_names,
                     InitReport& report) {
  const NamedTensor* wte = nullptr;
  if (const auto it = by_name.find("transformer.wte.weight"); it != by_name.end()) wte = it->second;
  std::vector<std::string> zero_biases;
  for (const NamedTensor& s : source.tensors) {
    if (used.count(s.name) != 0) continue;
    // A tied model: the file's head is the embedding (ampctl's export writes both).
    if (s.name == "lm_head.weight" && wte != nullptr && target_names.count(s.name) == 0 &&
        s.shape == wte->shape && s.dtype == wte->dtype && s.data == wte->data) {
      continue;
    }
    // A bias the model does not have, all zero: a bias-free GPT's hf export.
    if (s.name.size() > 5 && s.name.compare(s.name.size() - 5, 5, ".bias") == 0 &&
        target_names.count(s.name) == 0 && all_zero(s)) {
      zero_biases.push_back(s.name);
      continue;
    }
    report.unexpected.push_back(describe(s));
  }
  // One line for all of them (a bias-free GPT's hf export holds one per Linear and LayerNorm:
  // 25 for 4 layers): the count and the first and last names.
  if (!zero_biases.empty()) {
    std::string names = zero_biases.front();
    if (zero_biases.size() == 2) names += ", " + zero_biases.back();
    if (zero_biases.size() > 2) names += " ... " + zero_biases.back();
    report.adapted.push_back(std::to_string(zero_biases.size()) + " zero bias" +
                             (zero_biases.size() == 1 ? "" : "es") +
                             " the model has none of, ignored (" + names + ")");
  }
}

}  // namespace

InitReport load_init_weights(const InitSource& source, nn::Model& model, bool strict) {
  std::vector<std::pair<std::string, Tensor>> targets = model.state_tensors();
  for (auto& b : model.state_buffers()) targets.push_back(std::move(b));
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : source.tensors) by_name[t.name] = &t;
  std::set<std::string> used;
  std::set<std::string> target_names;
  for (const auto& [name, t] : targets) target_names.insert(name);

  InitReport report;
  std::vector<std::string> misfits;
  struct Upload {
    Tensor target;
    std::vector<uint8_t> bytes;
  };
  std::vector<Upload> uploads;

  for (const auto& [name, t] : targets) {
    const NamedTensor* s = nullptr;
    if (const auto it = by_name.find(name); it != by_name.end()) s = it->second;
    // A file without a head (Hugging Face's tied GPT-2) gives an untied model its embedding.
    if (s == nullptr && name == "lm_head.weight") {
      if (const auto it = by_name.find("transformer.wte.weight"); it != by_name.end()) {
        s = it->second;
        report.adapted.push_back(
            "lm_head.weight from transformer.wte.weight (the file's head is "
            "tied)");
      }
    }
    if (s == nullptr) {
      report.missing.push_back(name + " " + shape_str(t.shape()));
      continue;
    }
    used.insert(s->name);
    const std::string both = name + ": the file has " + dtype_name(s->dtype) + " " +
                             shape_str(s->shape) + ", the model needs " + dtype_name(t.dtype()) +
                             " " + shape_str(t.shape());
    if (t.dtype() != DType::f32 ? s->dtype != t.dtype() : s->dtype == DType::i32) {
      misfits.push_back(both);
      continue;
    }
    Upload u{t, {}};
    if (s->shape == t.shape()) {
      if (t.dtype() == DType::f32 && s->dtype != DType::f32) {
        const std::vector<float> v = as_f32(*s);
        u.bytes.assign(reinterpret_cast<const uint8_t*>(v.data()),
                       reinterpret_cast<const uint8_t*>(v.data() + v.size()));
      } else {
        u.bytes = s->data;
      }
      uploads.push_back(std::move(u));
      continue;
    }
    std::optional<std::vector<float>> v = crop_or_pad(name, *s, t, report);
    if (!v) {
      misfits.push_back(both);
      continue;
    }
    u.bytes.assign(reinterpret_cast<const uint8_t*>(v->data()),
                   reinterpret_cast<const uint8_t*>(v->data() + v->size()));
    uploads.push_back(std::move(u));
  }

  list_unexpected(source, by_name, used, target_names, report);

  const std::string origin = "init.from " + source.file.string() + " (" + source.format + ")";
  // Not one tensor in common: another model's weights (an MLP's for a GPT, ...). init.strict:
  // false cannot help there, so it is refused whatever init.strict says.
  if (used.empty() && !source.tensors.empty()) {
    std::string names;
    for (size_t i = 0; i < source.tensors.size() && i < 3; ++i) {
      names += (i ? ", " : "") + source.tensors[i].name;
    }
    if (source.tensors.size() > 3) names += ", ...";
    throw Error{ErrorKind::input,
                origin + " shares no tensor with the model (model.type: " + model.type() +
                    "): it holds another model's weights (" + names + ")",
                "--init-from takes weights of the same kind of model (a gpt's for a gpt, an "
                "mlp's for an mlp); init.strict: false cannot change that"};
  }
  if (!misfits.empty() || (strict && (!report.missing.empty() || !report.unexpected.empty()))) {
    std::string message = origin + " does not fit the model:";
    for (const std::string& m : misfits) message += "\n  " + m;
    for (const std::string& m : report.missing) message += "\n  missing from the file: " + m;
    if (strict) {
      for (const std::string& m : report.unexpected) message += "\n  not in the model: " + m;
    }
    const std::string hint =
        misfits.empty() ? "init.strict: false keeps the missing tensors' initialisation and "
                          "ignores the unexpected ones"
                        : "the model's configuration (model.*, the vocabulary, block_size) must "
                          "match the weights' (ampctl inspect shows a checkpoint's tensors)";
    throw Error{ErrorKind::input, message, hint};
  }
  for (const std::string& m : report.missing) {
    spdlog::warn("{}: {} missing: keeps the model's initialisation", origin, m);
  }
  for (const std::string& m : report.unexpected) {
    spdlog::warn("{}: {} is not in the model: ignored", origin, m);
  }
  Backend& b = model.backend();
  for (const Upload& u : uploads) b.upload(u.target, u.bytes.data(), u.bytes.size());
  model.sync_lowp();
  return report;
}

void check_init_vocab(const InitSource& source, const nlohmann::json& run_vocab) {
  if (run_vocab.is_null() || source.vocab.is_null() || source.vocab == run_vocab) return;
  const size_t n = std::min(source.vocab.size(), run_vocab.size());
  size_t i = 0;
  while (i < n && source.vocab[i] == run_vocab[i]) ++i;
  const std::string where = i < n
                                ? "token " + std::to_string(i) + " is " + source.vocab[i].dump() +
                                      " there and " + run_vocab[i].dump() + " here"
                                : "it holds " + std::to_string(source.vocab.size()) +
                                      " tokens, the run's text " + std::to_string(run_vocab.size());
  throw Error{ErrorKind::input,
              "init.from " + source.file.string() +
                  ": the weights were trained with another vocabulary than this run's text "
                  "gives (" +
                  where + "): the ids would mean other characters",
              "a run that starts from weights reads its text with their vocabulary: this is a "
              "defect if it shows"};
}

std::optional<data::Vocab> vocab_from_json(const nlohmann::json& json, const std::string& origin) {
  if (json.is_null()) return std::nullopt;
  return data::Vocab::from_json(json, origin + ": vocab");
}

nlohmann::json input_to_json(const data::Normalization& stats) {
  return {{"mean", stats.mean}, {"pixel_scale", stats.pixels ? 255 : 1}, {"std", stats.std}};
}

std::optional<data::Normalization> input_from_json(const nlohmann::json& json,
                                                   const std::string& origin) {
  if (json.is_null()) return std::nullopt;
  auto bad = [&] {
    return Error{ErrorKind::input,
                 origin +
                     ": input statistics: expected {\"mean\": [...], \"std\": [...], "
                     "\"pixel_scale\": 1 or 255}"};
  };
  if (!json.is_object() || !json.contains("mean") || !json.contains("std") ||
      !json.contains("pixel_scale") || !json["mean"].is_array() || !json["std"].is_array() ||
      json["mean"].size() != json["std"].size() || !json["pixel_scale"].is_number()) {
    throw bad();
  }
  data::Normalization s;
  const double scale = json["pixel_scale"].get<double>();
  if (scale != 1 && scale != 255) throw bad();
  s.pixels = scale == 255;
  for (const nlohmann::json& x : json["mean"]) {
    if (!x.is_number()) throw bad();
    s.mean.push_back(x.get<double>());
  }
  for (const nlohmann::json& x : json["std"]) {
    if (!x.is_number()) throw bad();
    s.std.push_back(x.get<double>());
  }
  return s;
}

}  // namespace ampctl::train
