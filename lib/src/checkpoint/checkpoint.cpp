// The checkpoint document: serialize / parse_checkpoint, and the checkpoints/ folder of a run
// directory (write_checkpoint, find_checkpoint, load_checkpoint). See checkpoint.h.
#include "ampctl/checkpoint/checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <system_error>

#include "ampctl/build_info.h"
#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/checkpoint/encoding.h"
#include "ampctl/checkpoint/scaler_state.h"
#include "ampctl/core/error.h"
#include "ampctl/core/half.h"
#include "ampctl/core/limits.h"

namespace ampctl::checkpoint {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little,
              "checkpoint tensors are stored little-endian and copied as raw host bytes");

namespace {

// the top-level keys of docs/reference.md, "Checkpoints", in the order serialize writes them.
constexpr const char* kTopLevelKeys[] = {"format",    "version", "ampctl_version", "step",
                                         "config",    "scaler",  "model",          "optimizer",
                                         "scheduler", "rng",     "data",           "metrics"};
// Keys a checkpoint may hold or not: the vocabulary of a language model on text data, the input
// statistics of a run with data.normalize (older checkpoints, and every other run's, have none).
// "crc32": the document's own CRC (document_crc), written last; checkpoints before it have none.
constexpr const char* kOptionalKeys[] = {"vocab", "input", "crc32"};
constexpr const char* kTensorKeys[] = {"dtype", "shape", "data", "crc32"};
const char* const kLatest = "latest";
// `latest` holds one file name and a newline.
constexpr size_t kMaxLatestBytes = 4096;
constexpr int kMaxDepth = 128;

// A function rather than a lambda at the call sites: clang before 16 cannot capture the
// structured bindings those loops declare.
template <size_t N>
bool is_one_of(const std::string& key, const char* const (&keys)[N]) {
  return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

std::string type_of(const ojson& v) {
  return v.type_name();
}

std::string short_dump(const ojson& v) {
  std::string s = v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// --- the scaler section: checkpoint/scaler_state.h judges it ({} = disabled) ---

std::optional<std::string> scaler_problem(const ojson& scaler) {
  return scaler_state_problem(scaler);
}

// --- tensors ---

// The byte count of `shape` x `dtype`, or nullopt when it overflows.
std::optional<uint64_t> byte_count(const Shape& shape, DType dtype) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

std::optional<std::string> tensor_problem(const NamedTensor& t) {
  if (t.name.empty()) return std::string("a tensor has an empty name");
  const std::optional<uint64_t> bytes = byte_count(t.shape, t.dtype);
  if (!bytes) return t.name + ": invalid shape " + shape_str(t.shape);
  if (*bytes != t.data.size()) {
    return t.name + ": " + std::to_string(t.data.size()) + " bytes of data, but " +
           dtype_name(t.dtype) + shape_str(t.shape) + " needs " + std::to_string(*bytes);
  }
  return std::nullopt;
}

ojson encode_tensors(const std::vector<NamedTensor>& tensors, const char* section) {
  ojson out = ojson::object();
  for (const NamedTensor& t : tensors) {
    if (std::optional<std::string> problem = tensor_problem(t)) {
      throw Error{ErrorKind::invalid_argument,
                  std::string("cannot serialize checkpoint: ") + section + " tensor " + *problem};
    }
    if (out.contains(t.name)) {
      throw Error{ErrorKind::invalid_argument, std::string("cannot serialize checkpoint: ") +
                                                   section + " tensor " + t.name +
                                                   ": duplicate name"};
    }
    ojson entry = ojson::object();
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data"] = base64_encode(t.data);
    entry["crc32"] = crc32_hex(crc32(t.data));
    out[t.name] = std::move(entry);
  }
  return out;
}

// Decodes one stored tensor; problems are reported as "SECTION tensor NAME: PROBLEM".
NamedTensor decode_tensor(const std::string& name, const ojson& entry, const std::string& where) {
  auto fail = [&](const std::string& problem) {
    return Error{ErrorKind::input, where + " tensor " + name + ": " + problem};
  };
  if (name.empty()) throw Error{ErrorKind::input, where + ": a tensor has an empty name"};
  if (!entry.is_object()) throw fail("expected an object, got " + type_of(entry));
  for (const char* key : kTensorKeys) {
    if (!entry.contains(key)) throw fail(std::string("missing key '") + key + "'");
  }
  for (const auto& [key, v] : entry.items()) {
    if (!is_one_of(key, kTensorKeys)) throw fail("unknown key '" + key + "'");
  }
  NamedTensor t;
  t.name = name;
  const ojson& dtype = entry.at("dtype");
  if (!dtype.is_string()) throw fail("dtype: expected a string, got " + type_of(dtype));
  try {
    t.dtype = parse_dtype(dtype.get<std::string>(), "dtype");
  } catch (const Error&) {
    throw fail("unknown dtype " + short_dump(dtype) + " (expected f32, f16, bf16 or i32)");
  }
  const ojson& shape = entry.at("shape");
  if (!shape.is_array()) throw fail("shape: expected an array, got " + type_of(shape));
  if (shape.size() > Shape::kMaxRank) {
    throw fail("shape " + short_dump(shape) + ": " + std::to_string(shape.size()) +
               " dimensions, tensors have at most " + std::to_string(Shape::kMaxRank));
  }
  for (const ojson& d : shape) {
    const bool valid =
        d.is_number_integer() &&
        (d.is_number_unsigned()
             ? d.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             : d.get<int64_t>() >= 0);
    if (!valid) throw fail("shape " + short_dump(shape) + ": dimensions must be integers >= 0");
    t.shape.push_back(d.get<int64_t>());
  }
  const std::optional<uint64_t> expected = byte_count(t.shape, t.dtype);
  if (!expected) throw fail("shape " + short_dump(shape) + ": too many elements");
  const ojson& data = entry.at("data");
  if (!data.is_string()) throw fail("data: expected a base64 string, got " + type_of(data));
  const ojson& crc = entry.at("crc32");
  uint32_t stored = 0;
  if (!crc.is_string() || !parse_crc32_hex(crc.get_ref<const std::string&>(), stored)) {
    throw fail("crc32: expected 8 lowercase hex digits, got " + short_dump(crc));
  }
  t.data = base64_decode(data.get_ref<const std::string&>(), where + " tensor " + name + ": data");
  if (t.data.size() != *expected) {
    throw fail("byte count mismatch: data holds " + std::to_string(t.data.size()) + " bytes, but " +
               dtype_name(t.dtype) + shape_str(t.shape) + " needs " + std::to_string(*expected));
  }
  const uint32_t computed = crc32(t.data);
  if (computed != stored) {
    throw fail("crc32 mismatch: stored " + crc32_hex(stored) + ", computed " + crc32_hex(computed) +
               " (the tensor data is damaged)");
  }
  return t;
}

// --- the values: every tensor's domain ---

// The bits of element i as a double (f32, f16, bf16; i32 as its integer).
double element(const NamedTensor& t, size_t i) {
  switch (t.dtype) {
    case DType::f32: {
      float v;
      std::memcpy(&v, t.data.data() + 4 * i, 4);
      return v;
    }
    case DType::f16: {
      half v;
      std::memcpy(&v, t.data.data() + 2 * i, 2);
      return static_cast<float>(v);
    }
    case DType::bf16: {
      bfloat16 v;
      std::memcpy(&v, t.data.data() + 2 * i, 2);
      return static_cast<float>(v);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, t.data.data() + 4 * i, 4);
      return v;
    }
  }
  return 0.0;
}

std::string number_text(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A value no run can produce, so that loading it would train on garbage and save it again:
// a non-finite parameter, buffer or moment (a run whose state went non-finite never writes a
// checkpoint of it: the divergence stop keeps the last good one), a negative variance or second
// moment, a step counter below 0 or above the checkpoint's step, a negative BatchNorm count.
std::optional<std::string> domain_problem(const NamedTensor& t, int64_t step) {
  const bool floating = t.dtype != DType::i32;
  const bool variance = t.name.ends_with("running_var") || t.name.ends_with("exp_avg_sq");
  const bool counter = t.name.ends_with(".step") || t.name.ends_with("num_batches_tracked");
  const auto n = static_cast<size_t>(t.numel());
  // The text is made only for the element refused: writers check every checkpoint's hundreds
  // of millions of values (state_problems).
  const auto at = [&](size_t i, double v) {
    return "element " + std::to_string(i) + " is " + number_text(v);
  };
  const bool steps = counter && t.name.ends_with(".step");
  for (size_t i = 0; i < n; ++i) {
    const double v = element(t, i);
    if (floating && !std::isfinite(v)) return at(i, v) + ": not finite";
    if (variance && v < 0.0) return at(i, v) + ": a variance or second moment must be >= 0";
    if (counter && (v < 0.0 || v != std::floor(v)))
      return at(i, v) + ": a counter must be an integer >= 0";
    if (steps && v > static_cast<double>(step)) {
      return at(i, v) + ": the optimizer cannot have taken more steps than the checkpoint's " +
             std::to_string(step);
    }
  }
  return std::nullopt;
}

void check_domains(const std::vector<NamedTensor>& tensors, int64_t step,
                   const std::string& where) {
  for (const NamedTensor& t : tensors) {
    if (std::optional<std::string> problem = domain_problem(t, step)) {
      throw Error{ErrorKind::input, where + " tensor " + t.name + ": " + *problem,
                  "the file was edited or written by something else: resume from another "
                  "checkpoint of the run (checkpoints/step-*.json)"};
    }
  }
}

// The CRC-32 of the document's compact JSON text without its "crc32" key and without its
// tensors' "data" (each tensor's own "crc32", which it keeps, covers that): so an edit anywhere
// (config, scaler, metrics, vocab, a tensor's shape) is refused, and checking costs no second
// pass over the tensor bytes.
uint32_t document_crc(const ojson& doc) {
  ojson copy = ojson::object();
  for (const auto& [key, v] : doc.items()) {
    if (key == "crc32") continue;
    if ((key != "model" && key != "optimizer") || !v.is_object()) {
      copy[key] = v;
      continue;
    }
    ojson section = ojson::object();
    for (const auto& [k, x] : v.items()) {
      if (k != "tensors" || !x.is_object()) {
        section[k] = x;
        continue;
      }
      ojson tensors = ojson::object();
      for (const auto& [name, entry] : x.items()) {
        ojson e = ojson::object();
        if (entry.is_object()) {
          for (const auto& [ek, ev] : entry.items()) {
            if (ek != "data") e[ek] = ev;
          }
        }
        tensors[name] = std::move(e);
      }
      section[k] = std::move(tensors);
    }
    copy[key] = std::move(section);
  }
  const std::string text = copy.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return crc32(text.data(), text.size());
}

void check_document_crc(const ojson& doc, const std::string& origin) {
  if (!doc.contains("crc32")) return;
  const ojson& crc = doc.at("crc32");
  uint32_t stored = 0;
  if (!crc.is_string() || !parse_crc32_hex(crc.get_ref<const std::string&>(), stored)) {
    throw Error{ErrorKind::input,
                origin + ": crc32: expected 8 lowercase hex digits, got " + short_dump(crc)};
  }
  const uint32_t computed = document_crc(doc);
  if (computed != stored) {
    throw Error{ErrorKind::input,
                origin + ": crc32 mismatch over the document: stored " + crc32_hex(stored) +
                    ", computed " + crc32_hex(computed) +
                    " (the file was edited or damaged: its config, scaler, optimizer, metrics or "
                    "vocab no longer hold what was written)",
                "resume from another checkpoint of the run (checkpoints/step-*.json)"};
  }
}

std::vector<NamedTensor> decode_tensors(const ojson& tensors, const std::string& where) {
  if (!tensors.is_object()) {
    throw Error{ErrorKind::input, where + ".tensors: expected an object, got " + type_of(tensors)};
  }
  std::vector<NamedTensor> out;
  out.reserve(tensors.size());
  for (const auto& [name, entry] : tensors.items())
    out.push_back(decode_tensor(name, entry, where));
  return out;
}

// --- the document ---

std::string position_hint(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "byte " + std::to_string(byte) + " (line " + std::to_string(line) + ", column " +
         std::to_string(column) + ")";
}

// nlohmann's message without its "[json.exception.KIND.ID] " prefix.
std::string json_message(const ojson::exception& e) {
  std::string what = e.what();
  if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
  return what;
}

ojson parse_json(std::string_view text, const std::string& origin) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (text.empty()) throw Error{ErrorKind::input, origin + ": empty file (0 bytes)"};
  if (first == std::string_view::npos) {
    throw Error{ErrorKind::input, origin + ": empty file (only whitespace)"};
  }
  // nlohmann's lexer reads a NUL byte as the end of the input, so a document followed by NULs
  // (a preallocated or zero-padded file) would parse; raw NULs are never valid JSON.
  // (A file that does not even start like JSON is "not JSON at all", below.)
  const bool json_start = text[first] == '{' || text[first] == '[';
  if (const size_t nul = text.find('\0'); json_start && nul != std::string_view::npos) {
    throw Error{ErrorKind::input,
                origin + ": a NUL byte at offset " + std::to_string(nul) +
                    ": not JSON text (bytes after the document, or a zero-filled end?)",
                "a checkpoint is one JSON document and nothing else"};
  }
  // Copying, comparing and dumping JSON recurse: a hostile file nested a million levels deep
  // would overflow the stack. Ours is at most a few levels (config sections, scheduler state).
  // Duplicate keys: JSON leaves them undefined and nlohmann keeps the last silently, so a
  // hand-edited or concatenated file could mean two things. Each open object's keys so far:
  std::vector<std::vector<std::string>> keys;
  const auto limit_depth = [&](int depth, ojson::parse_event_t event, ojson& parsed) {
    if (depth > kMaxDepth && (event == ojson::parse_event_t::object_start ||
                              event == ojson::parse_event_t::array_start)) {
      throw Error{ErrorKind::input,
                  origin + ": JSON nested deeper than " + std::to_string(kMaxDepth) + " levels"};
    }
    if (event == ojson::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == ojson::parse_event_t::object_end && !keys.empty()) {
      keys.pop_back();
    } else if (event == ojson::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      std::vector<std::string>& seen = keys.back();
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        throw Error{ErrorKind::input, origin + ": duplicate key " + short_dump(parsed) +
                                          " in one object (JSON leaves its meaning undefined)"};
      }
      seen.push_back(key);
    }
    return true;
  };
  try {
    return ojson::parse(text, limit_depth);
  } catch (const ojson::parse_error& e) {
    if (text[first] != '{' && text[first] != '[') {
      char c[16];
      const auto u = static_cast<unsigned char>(text[first]);
      std::snprintf(c, sizeof c, u >= 0x20 && u < 0x7f ? "'%c'" : "byte 0x%02x",
                    u >= 0x20 && u < 0x7f ? static_cast<int>(text[first]) : static_cast<int>(u));
      throw Error{ErrorKind::input,
                  origin + ": not JSON at all (it starts with " + c + ", not '{')",
                  "an ampctl checkpoint is a JSON file (checkpoints/step-NNNNNNNN.json)"};
    }
    // e.byte is 1-based; input that stops mid-document fails on reading past its end.
    if (e.byte > text.size()) {
      throw Error{ErrorKind::input,
                  origin + ": truncated: the JSON ends unexpectedly at byte " +
                      std::to_string(text.size()) + " (an interrupted copy or write?)",
                  "resume from the run directory to fall back to its newest complete checkpoint"};
    }
    throw Error{ErrorKind::input, origin + ": invalid JSON at " + position_hint(text, e.byte - 1) +
                                      ": " + json_message(e)};
  } catch (const ojson::out_of_range& e) {
    // A number beyond double's range (1e999) is nlohmann's out_of_range 406, not a parse_error,
    // and comes without a position; its message quotes the number.
    throw Error{ErrorKind::input,
                origin + ": invalid JSON: " + json_message(e) + " (beyond the range of a double)"};
  }
}

void check_top_level(const ojson& doc, const std::string& origin) {
  if (!doc.is_object()) {
    throw Error{ErrorKind::input, origin + ": not an ampctl checkpoint: the document is " +
                                      (doc.is_array() ? "an " : "a ") + type_of(doc) +
                                      ", not an object"};
  }
  if (!doc.contains("format")) {
    throw Error{ErrorKind::input, origin + ": not an ampctl checkpoint: no \"format\" key"};
  }
  if (doc.at("format") != kFormat) {
    throw Error{ErrorKind::input, origin + ": not an ampctl checkpoint: \"format\" is " +
                                      short_dump(doc.at("format")) + ", expected \"" + kFormat +
                                      "\""};
  }
  if (!doc.contains("version")) throw Error{ErrorKind::input, origin + ": missing key 'version'"};
  const ojson& version = doc.at("version");
  if (!version.is_number_integer() || version.get<int64_t>() != kVersion) {
    std::string by;
    if (doc.contains("ampctl_version") && doc.at("ampctl_version").is_string()) {
      by = " (written by ampctl " + doc.at("ampctl_version").get<std::string>() + ")";
    }
    throw Error{ErrorKind::input, origin + ": unsupported checkpoint version " +
                                      short_dump(version) + by +
                                      "; this build (ampctl " AMPCTL_VERSION ") supports version " +
                                      std::to_string(kVersion) + " only"};
  }
  for (const char* key : kTopLevelKeys) {
    if (!doc.contains(key)) {
      throw Error{ErrorKind::input, origin + ": missing top-level key '" + key + "'"};
    }
  }
  for (const auto& [key, v] : doc.items()) {
    if (!is_one_of(key, kTopLevelKeys) && !is_one_of(key, kOptionalKeys)) {
      throw Error{ErrorKind::input, origin + ": unknown top-level key '" + key + "'"};
    }
  }
  if (!doc.at("ampctl_version").is_string()) {
    throw Error{ErrorKind::input, origin + ": ampctl_version: expected a string, got " +
                                      type_of(doc.at("ampctl_version"))};
  }
  const ojson& step = doc.at("step");
  if (!step.is_number_integer() || (!step.is_number_unsigned() && step.get<int64_t>() < 0) ||
      (step.is_number_unsigned() &&
       step.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    throw Error{ErrorKind::input,
                origin + ": step: expected an integer >= 0, got " + short_dump(step)};
  }
  // A step near int64's end would train at negative step numbers; one past the run's own
  // max_steps was never written by ampctl.
  const int64_t steps = step.get<int64_t>();
  if (steps > kMaxSteps) {
    throw Error{ErrorKind::input, origin + ": step: " + std::to_string(steps) +
                                      " is beyond the most a run may take (" +
                                      std::to_string(kMaxSteps) + ")"};
  }
  if (doc.at("config").is_object() && doc.at("config").contains("training") &&
      doc.at("config").at("training").is_object() &&
      doc.at("config").at("training").contains("max_steps")) {
    const ojson& max_steps = doc.at("config").at("training").at("max_steps");
    if (max_steps.is_number_integer() && max_steps.get<int64_t>() >= 0 &&
        steps > max_steps.get<int64_t>()) {
      throw Error{ErrorKind::input, origin + ": step: " + std::to_string(steps) +
                                        " is beyond the run's training.max_steps (" +
                                        std::to_string(max_steps.get<int64_t>()) +
                                        "): not a checkpoint ampctl wrote"};
    }
  }
  for (const char* key :
       {"config", "scaler", "model", "optimizer", "scheduler", "rng", "data", "metrics"}) {
    if (!doc.at(key).is_object()) {
      throw Error{ErrorKind::input,
                  origin + ": " + key + ": expected an object, got " + type_of(doc.at(key))};
    }
  }
}

// A vocabulary is null (none) or a non-empty array of strings (data/vocab.h reads it).
std::optional<std::string> input_problem(const nlohmann::json& input) {
  if (input.is_null()) return std::nullopt;
  if (!input.is_object()) return "input: expected an object, got " + std::string(input.type_name());
  for (const auto& [key, v] : input.items()) {
    if (key != "mean" && key != "std" && key != "pixel_scale")
      return "input: unknown key '" + key + "'";
  }
  if (!input.contains("pixel_scale") || !input["pixel_scale"].is_number() ||
      !(input["pixel_scale"].get<double>() > 0)) {
    return std::string("input: pixel_scale must be a number > 0");
  }
  for (const char* key : {"mean", "std"}) {
    if (!input.contains(key) || !input[key].is_array() || input[key].empty())
      return std::string("input: ") + key + " must be a non-empty array of numbers";
    for (const nlohmann::json& x : input[key]) {
      if (!x.is_number()) return std::string("input: ") + key + " holds a non-number";
    }
  }
  if (input["mean"].size() != input["std"].size()) {
    return "input: mean has " + std::to_string(input["mean"].size()) + " values, std " +
           std::to_string(input["std"].size());
  }
  return std::nullopt;
}

std::optional<std::string> vocab_problem(const nlohmann::json& vocab) {
  if (vocab.is_null()) return std::nullopt;
  if (!vocab.is_array() || vocab.empty()) {
    return "vocab: expected a non-empty array of strings, got " + std::string(vocab.type_name());
  }
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (!vocab[i].is_string()) {
      return "vocab: entry " + std::to_string(i) + " is " + vocab[i].type_name() + ", not a string";
    }
  }
  return std::nullopt;
}

nlohmann::json free_form(const ojson& v) {
  return nlohmann::json(v);
}

void check_section(const nlohmann::json& v, const char* name) {
  if (!v.is_object()) {
    throw Error{ErrorKind::invalid_argument, std::string("cannot serialize checkpoint: ") + name +
                                                 ": expected an object, got " + v.type_name()};
  }
}

// The step of a checkpoint file name "step-" + 8 to 18 digits + ".json", else nullopt. (Written
// out rather than as a std::regex: GCC 12 with -fsanitize=address reports false
// -Wmaybe-uninitialized warnings inside <regex>, and this is all the pattern said.)
std::optional<int64_t> step_of_file_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-", kSuffix = ".json";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');  // 18 digits stay below 2^63
  }
  return step;
}

struct Candidate {
  int64_t step;
  fs::path path;
};

// step-*.json in `dir`, newest (highest step) first.
std::vector<Candidate> list_checkpoints(const fs::path& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const std::optional<int64_t> step = step_of_file_name(name)) {
      out.push_back({*step, it->path()});
    }
  }
  if (ec) {
    throw Error{ErrorKind::runtime, "cannot list " + dir.string() + ": " + ec.message()};
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return out;
}

// The file name checkpoints/latest holds, or nullopt with `problem` set.
std::optional<std::string> read_latest(const fs::path& dir, std::string& problem) {
  const fs::path latest = dir / kLatest;
  std::error_code ec;
  if (!fs::exists(latest, ec)) {
    problem = "there is no " + latest.string();
    return std::nullopt;
  }
  std::string text;
  try {
    text = read_file(latest, kMaxLatestBytes);
  } catch (const Error& e) {
    problem = e.what();
    return std::nullopt;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (!step_of_file_name(text)) {
    // Not echoed: `latest` may be a link to any file, whose first bytes are nobody's business.
    problem = latest.string() + " does not hold a checkpoint file name (step-NNNNNNNN.json; it " +
              "holds " + std::to_string(text.size()) + " bytes)";
    return std::nullopt;
  }
  return text;
}

struct Verified {
  std::optional<CheckpointData> data;
  std::string problem;
};

Verified verify(const fs::path& file) {
  try {
    return {parse_checkpoint(read_file(file), file.string()), {}};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  }
}

LoadedCheckpoint find_in_directory(const fs::path& path) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(path / "checkpoints", ec) ? path / "checkpoints" : path;
  std::vector<std::string> problems;

  std::string latest_problem;
  std::optional<std::string> latest_name = read_latest(dir, latest_problem);
  if (latest_name) {
    Verified v = verify(dir / *latest_name);
    if (v.data) return {dir / *latest_name, std::move(*v.data)};
    latest_problem =
        (dir / kLatest).string() + " names " + *latest_name + ", which is unusable: " + v.problem;
  }
  problems.push_back(latest_problem);

  for (const Candidate& c : list_checkpoints(dir)) {
    if (latest_name && c.path.filename() == *latest_name) continue;
    Verified v = verify(c.path);
    if (v.data) {
      spdlog::warn("{}; using {} (step {}), the newest complete checkpoint", latest_problem,
                   c.path.string(), c.step);
      for (size_t i = 1; i < problems.size(); ++i) spdlog::warn("skipped: {}", problems[i]);
      return {c.path, std::move(*v.data)};
    }
    problems.push_back(v.problem);
  }
  std::string hint;
  for (const std::string& p : problems) hint += (hint.empty() ? "" : "\nhint: ") + p;
  throw Error{ErrorKind::input, "no complete checkpoint in " + path.string(), hint};
}

LoadedCheckpoint locate(const fs::path& path, bool load_file) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    throw Error{ErrorKind::input, path.string() + ": no such file or directory"};
  }
  if (fs::is_directory(st)) return find_in_directory(path);
  if (!load_file) return {path, {}};
  return {path, parse_checkpoint(read_file(path), path.string())};
}

void prune(const fs::path& dir, const std::string& keep_name, int64_t keep_last,
           const std::vector<std::string>& keep, std::vector<fs::path>* removed) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // Only our own leftovers: temp files of checkpoints and of latest from a killed write, and
    // never one a live process is still writing (temporary_file_orphaned).
    if (is_temporary_file(name) &&
        (name.rfind(".step-", 0) == 0 || name.rfind(".latest", 0) == 0) &&
        temporary_file_orphaned(it->path())) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
  const std::vector<Candidate> all = list_checkpoints(dir);
  int64_t kept = 0;
  for (const Candidate& c : all) {
    if (c.path.filename() == keep_name) continue;
    if (std::find(keep.begin(), keep.end(), c.path.filename().string()) != keep.end()) continue;
    if (kept < keep_last - 1) {
      ++kept;
      continue;
    }
    std::error_code rm;
    if (!fs::remove(c.path, rm) && rm) {
      spdlog::warn("cannot remove old checkpoint {}: {}", c.path.string(), rm.message());
    } else if (removed != nullptr) {
      removed->push_back(c.path);
    }
  }
}

}  // namespace

NamedTensor from_host_tensor(std::string name, const Tensor& host) {
  if (!host.defined() || !host.is_cpu()) {
    throw Error{ErrorKind::invalid_argument,
                "checkpoint tensor " + name + ": expected a host tensor, got " +
                    (host.defined() ? host.describe() : std::string("an undefined tensor"))};
  }
  NamedTensor t{std::move(name), host.dtype(), host.shape(), {}};
  t.data.resize(host.nbytes());
  if (!t.data.empty()) std::memcpy(t.data.data(), host.data(), t.data.size());
  return t;
}

Tensor to_host_tensor(const NamedTensor& tensor) {
  if (std::optional<std::string> problem = tensor_problem(tensor)) {
    throw Error{ErrorKind::invalid_argument, "checkpoint tensor " + *problem};
  }
  Tensor host = Tensor::host(tensor.shape, tensor.dtype);
  if (!tensor.data.empty()) std::memcpy(host.data(), tensor.data.data(), tensor.data.size());
  return host;
}

std::string serialize(const CheckpointData& data) {
  if (data.step < 0) {
    throw Error{ErrorKind::invalid_argument,
                "cannot serialize checkpoint: step must be >= 0, got " + std::to_string(data.step)};
  }
  check_section(data.config, "config");
  check_section(data.optimizer, "optimizer");
  check_section(data.scheduler, "scheduler");
  check_section(data.rng, "rng");
  check_section(data.data, "data");
  check_section(data.metrics, "metrics");
  if (data.optimizer.contains("tensors")) {
    throw Error{ErrorKind::invalid_argument,
                "cannot serialize checkpoint: optimizer: the key 'tensors' is reserved for "
                "optimizer_tensors"};
  }
  const ojson scaler(data.scaler);
  if (std::optional<std::string> problem = scaler_problem(scaler)) {
    throw Error{ErrorKind::invalid_argument, "cannot serialize checkpoint: " + *problem};
  }
  if (std::optional<std::string> problem = vocab_problem(data.vocab)) {
    throw Error{ErrorKind::invalid_argument, "cannot serialize checkpoint: " + *problem};
  }
  if (std::optional<std::string> problem = input_problem(data.input)) {
    throw Error{ErrorKind::invalid_argument, "cannot serialize checkpoint: " + *problem};
  }

  ojson doc = ojson::object();
  doc["format"] = kFormat;
  doc["version"] = kVersion;
  doc["ampctl_version"] = AMPCTL_VERSION;
  doc["step"] = data.step;
  doc["config"] = ojson(data.config);
  doc["scaler"] = scaler;
  doc["model"] = ojson::object();
  doc["model"]["tensors"] = encode_tensors(data.model, "model");
  ojson optimizer(data.optimizer);
  optimizer["tensors"] = encode_tensors(data.optimizer_tensors, "optimizer");
  doc["optimizer"] = std::move(optimizer);
  doc["scheduler"] = ojson(data.scheduler);
  doc["rng"] = ojson(data.rng);
  doc["data"] = ojson(data.data);
  doc["metrics"] = ojson(data.metrics);
  if (!data.vocab.is_null()) doc["vocab"] = ojson(data.vocab);
  if (!data.input.is_null()) doc["input"] = ojson(data.input);
  try {
    doc["crc32"] = crc32_hex(document_crc(doc));
    // Indented so a person can read the configuration and state; the tensors are one line each.
    return doc.dump(1, '\t') + "\n";
  } catch (const ojson::exception& e) {
    throw Error{ErrorKind::invalid_argument,
                std::string("cannot serialize checkpoint: ") + e.what()};
  }
}

CheckpointData parse_checkpoint(std::string_view text, const std::string& origin) {
  const ojson doc = parse_json(text, origin);
  check_top_level(doc, origin);
  if (std::optional<std::string> problem = scaler_problem(doc.at("scaler"))) {
    throw Error{ErrorKind::input, origin + ": " + *problem};
  }
  const ojson& model = doc.at("model");
  if (!model.contains("tensors"))
    throw Error{ErrorKind::input, origin + ": model: missing key 'tensors'"};
  for (const auto& [key, v] : model.items()) {
    if (key != "tensors")
      throw Error{ErrorKind::input, origin + ": model: unknown key '" + key + "'"};
  }

  CheckpointData data;
  data.step = doc.at("step").get<int64_t>();
  data.config = free_form(doc.at("config"));
  data.scaler = free_form(doc.at("scaler"));
  data.model = decode_tensors(model.at("tensors"), origin + ": model");
  ojson optimizer = doc.at("optimizer");
  if (optimizer.contains("tensors")) {
    data.optimizer_tensors = decode_tensors(optimizer.at("tensors"), origin + ": optimizer");
    optimizer.erase("tensors");
  }
  data.optimizer = free_form(optimizer);
  data.scheduler = free_form(doc.at("scheduler"));
  data.rng = free_form(doc.at("rng"));
  data.data = free_form(doc.at("data"));
  data.metrics = free_form(doc.at("metrics"));
  if (doc.contains("vocab")) {
    data.vocab = free_form(doc.at("vocab"));
    if (std::optional<std::string> problem = vocab_problem(data.vocab)) {
      throw Error{ErrorKind::input, origin + ": " + *problem};
    }
  }
  if (doc.contains("input")) {
    data.input = free_form(doc.at("input"));
    if (std::optional<std::string> problem = input_problem(data.input)) {
      throw Error{ErrorKind::input, origin + ": " + *problem};
    }
  }
  // Every part well formed: then the whole document as written, then what the values mean.
  check_document_crc(doc, origin);
  check_domains(data.model, data.step, origin + ": model");
  check_domains(data.optimizer_tensors, data.step, origin + ": optimizer");
  return data;
}

std::string checkpoint_file_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%08lld.json", static_cast<long long>(step));
  return buf;
}

fs::path write_checkpoint(const fs::path& run_dir, const CheckpointData& data, int64_t keep_last,
                          const std::vector<std::string>& keep, std::vector<fs::path>* removed) {
  if (keep_last < 1) {
    throw Error{ErrorKind::invalid_argument,
                "write_checkpoint: keep_last must be >= 1, got " + std::to_string(keep_last)};
  }
  const std::string text = serialize(data);
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot create " + dir.string() + ": " + ec.message()};
  const std::string name = checkpoint_file_name(data.step);
  // Order matters: latest may only ever name a file that is complete on disk.
  write_file_atomic(dir / name, text);
  write_file_atomic(dir / kLatest, name + "\n");
  try {
    prune(dir, name, keep_last, keep, removed);
  } catch (const Error& e) {
    // The checkpoint is safely written; old files left behind are only a nuisance.
    spdlog::warn("checkpoint {} written, but pruning old ones failed: {}", name, e.what());
  }
  return dir / name;
}

fs::path adopt_checkpoint(const fs::path& run_dir, const fs::path& file, int64_t step) {
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot create " + dir.string() + ": " + ec.message()};
  const std::string name = checkpoint_file_name(step);
  write_file_atomic(dir / name, read_file(file));
  write_file_atomic(dir / kLatest, name + "\n");
  return dir / name;
}

std::vector<fs::path> checkpoints_after(const fs::path& checkpoints_dir, int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  std::vector<fs::path> out;
  const std::vector<Candidate> all = list_checkpoints(checkpoints_dir);  // newest first
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->step > step) out.push_back(it->path);
  }
  return out;
}

fs::path find_checkpoint(const fs::path& path) {
  return locate(path, false).path;
}

LoadedCheckpoint load_checkpoint(const fs::path& path) {
  return locate(path, true);
}

CheckpointData read_checkpoint(const fs::path& path) {
  return load_checkpoint(path).data;
}

nlohmann::ordered_json summarize(const CheckpointData& data, const fs::path& file) {
  ojson s = ojson::object();
  s["file"] = file.string();
  s["step"] = data.step;
  const bool enabled = data.scaler.is_object() && !data.scaler.empty();
  s["scaler_enabled"] = enabled;
  s["scale"] = enabled ? ojson(data.scaler.at("scale")) : ojson(nullptr);
  s["growth_tracker"] = enabled ? ojson(data.scaler.at("_growth_tracker")) : ojson(nullptr);
  if (data.metrics.is_object() && data.metrics.contains("last_loss")) {
    s["last_loss"] = ojson(data.metrics.at("last_loss"));
  }
  int64_t parameters = 0;
  for (const NamedTensor& t : data.model) parameters += t.numel();
  s["parameters"] = parameters;
  auto config_string = [&](const char* section, const char* key) -> ojson {
    const nlohmann::json* v = &data.config;
    if (section) {
      if (!v->is_object() || !v->contains(section)) return nullptr;
      v = &v->at(section);
    }
    if (!v->is_object() || !v->contains(key) || !v->at(key).is_string()) return nullptr;
    return v->at(key).get<std::string>();
  };
  s["precision"] = config_string(nullptr, "precision");
  s["optimizer"] = config_string("optimizer", "type");
  s["optimizer_tensors"] = data.optimizer_tensors.size();
  ojson tensors = ojson::array();
  for (const NamedTensor& t : data.model) {
    tensors.push_back({{"name", t.name},
                       {"dtype", dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"numel", t.numel()}});
  }
  s["tensors"] = std::move(tensors);
  return s;
}

std::vector<StateProblem> state_problems(const CheckpointData& data) {
  std::vector<StateProblem> out;
  for (const auto& [section, tensors] :
       {std::pair{"model", &data.model}, std::pair{"optimizer", &data.optimizer_tensors}}) {
    for (const NamedTensor& t : *tensors) {
      if (std::optional<std::string> problem = domain_problem(t, data.step)) {
        out.push_back({section, t.name, std::move(*problem)});
      }
    }
  }
  return out;
}

}  // namespace ampctl::checkpoint
