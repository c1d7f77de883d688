// The configuration's field tables: docs/reference.md, "Configuration", one declaration per key.
// Everything else in this module (parsing, validation, --set, the YAML and JSON dumps, `ampctl
// validate`) reads these tables; adding a key means adding one line here and a member to
// run_config.h.
#include "ampctl/config/run_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "ampctl/config/base.h"
#include "ampctl/config/config_file.h"
#include "ampctl/config/document.h"
#include "ampctl/config/reference.h"
#include "ampctl/config/schema.h"
#include "ampctl/core/input_file.h"

namespace ampctl::config {

// ---- the YAML spelling of each choice (to_string and the parser both read these) ----

namespace {

template <class E>
using Names = std::pair<E, const char*>;

constexpr Names<Precision> kPrecision[] = {
    {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}, {Precision::fp32, "fp32"}};
constexpr const auto& kModelType = nn::kModelTypeNames;
constexpr Names<DecayOn> kDecayOn[] = {{DecayOn::all, "all"}, {DecayOn::matrices, "matrices"}};
constexpr Names<Activation> kActivation[] = {
    {Activation::relu, "relu"}, {Activation::gelu, "gelu"}, {Activation::tanh, "tanh"}};
constexpr const auto& kLoss = nn::kLossKindNames;
constexpr const auto& kSource = data::kSourceKindNames;
constexpr const auto& kVocab = data::kVocabKindNames;
constexpr const auto& kTokenFormat = data::kTokenFormatNames;
constexpr const auto& kTask = data::kTaskNames;
constexpr const auto& kSplit = data::kDatasetSplitNames;
constexpr Names<OptimizerType> kOptimizer[] = {
    {OptimizerType::sgd, "sgd"}, {OptimizerType::adam, "adam"}, {OptimizerType::adamw, "adamw"}};
constexpr const auto& kScheduler = optim::kScheduleTypeNames;
constexpr const auto& kAnneal = optim::kAnnealNames;
constexpr Names<Toggle> kToggle[] = {
    {Toggle::automatic, "auto"}, {Toggle::on, "true"}, {Toggle::off, "false"}};
constexpr Names<InjectValue> kInject[] = {{InjectValue::inf, "inf"}, {InjectValue::nan, "nan"}};
// scaler.policy's names, from the table of scale rules.
constexpr auto kScalePolicy = [] {
  std::array<Names<amp::ScalePolicy>, amp::kScaleRules.size()> names{};
  for (size_t i = 0; i < names.size(); ++i) {
    names[i] = {amp::kScaleRules[i].policy, amp::kScaleRules[i].name};
  }
  return names;
}();
constexpr const auto& kDistBackend = dist::kCommBackendNames;
constexpr Names<OnOverflow> kOnOverflow[] = {{OnOverflow::skip, "skip"},
                                             {OnOverflow::retry, "retry"}};
constexpr Names<OnMinScale> kOnMinScale[] = {{OnMinScale::keep_going, "continue"},
                                             {OnMinScale::stop, "stop"}};
constexpr Names<EvalMetric> kEvalMetric[] = {{EvalMetric::none, "none"},
                                             {EvalMetric::eval_loss, "eval_loss"},
                                             {EvalMetric::eval_accuracy, "eval_accuracy"}};

// The rules' names joined by `sep` ("pytorch | deepspeed | ...").
std::string scale_rule_names(const char* sep) {
  std::string s;
  for (const amp::ScaleRule& r : amp::kScaleRules)
    s += (s.empty() ? "" : sep) + std::string(r.name);
  return s;
}

// The rules that read a scaler.* key (amp::ScaleSetting): the key's .when("scaler.policy", ...).
std::vector<std::string> rules_reading(uint32_t setting) {
  std::vector<std::string> names;
  for (const amp::ScaleRule& r : amp::kScaleRules) {
    if (r.settings & setting) names.emplace_back(r.name);
  }
  return names;
}

template <class E, size_t N>
const char* name_in(const Names<E> (&names)[N], E v) {
  for (const auto& [e, name] : names) {
    if (e == v) return name;
  }
  return "?";
}

}  // namespace

const char* to_string(Precision v) {
  return name_in(kPrecision, v);
}
const char* to_string(ModelType v) {
  return name_in(kModelType, v);
}
const char* to_string(DecayOn v) {
  return name_in(kDecayOn, v);
}
const char* to_string(Activation v) {
  return name_in(kActivation, v);
}
const char* to_string(LossType v) {
  return name_in(kLoss, v);
}
const char* to_string(SourceKind v) {
  return name_in(kSource, v);
}
const char* to_string(VocabKind v) {
  return name_in(kVocab, v);
}
const char* to_string(TokenFormat v) {
  return name_in(kTokenFormat, v);
}
const char* to_string(DatasetSplit v) {
  return name_in(kSplit, v);
}
const char* to_string(OptimizerType v) {
  return name_in(kOptimizer, v);
}
const char* to_string(SchedulerType v) {
  return name_in(kScheduler, v);
}
const char* to_string(AnnealStrategy v) {
  return name_in(kAnneal, v);
}
const char* to_string(Toggle v) {
  return name_in(kToggle, v);
}
const char* to_string(InjectValue v) {
  return name_in(kInject, v);
}
const char* to_string(DistBackend v) {
  return name_in(kDistBackend, v);
}
const char* to_string(OnOverflow v) {
  return name_in(kOnOverflow, v);
}
const char* to_string(OnMinScale v) {
  return name_in(kOnMinScale, v);
}
const char* to_string(EvalMetric v) {
  return name_in(kEvalMetric, v);
}

Task task_of(const DataSource& source) {
  switch (source.source) {
    case SourceKind::synthetic:
    case SourceKind::csv:
      return source.task;
    default:
      return Task::classification;
  }
}

bool is_language_model(const DataSource& source) {
  return source.source == SourceKind::text || source.source == SourceKind::tokens;
}

bool scaler_enabled(const RunConfig& config) {
  switch (config.scaler.enabled) {
    case Toggle::on:
      return true;
    case Toggle::off:
      return false;
    case Toggle::automatic:
      break;
  }
  return config.precision == Precision::fp16;
}

bool schedule_decays(const RunConfig& config) {
  const SchedulerType t = config.scheduler.type;
  return t == SchedulerType::linear || t == SchedulerType::cosine || t == SchedulerType::onecycle;
}

int64_t schedule_steps(const RunConfig& config) {
  if (schedule_decays(config) && config.scheduler.decay_steps > 0) {
    return config.scheduler.decay_steps;
  }
  return config.training.max_steps;
}

bool has_eval_data(const RunConfig& config) {
  return config.data.eval.has_value() ||
         (is_language_model(config.data.train) && config.data.train.split_fraction > 0);
}

std::vector<std::string> eval_set_names(const RunConfig& config) {
  if (!has_eval_data(config)) return {};
  std::vector<std::string> names{config.data.eval_name.empty() ? "eval" : config.data.eval_name};
  for (const NamedEvalSource& e : config.data.eval_sets) names.push_back(e.name);
  return names;
}

size_t eval_set_index(const RunConfig& config, const EvalMetricRef& metric) {
  if (metric.set.empty()) return 0;
  const std::vector<std::string> names = eval_set_names(config);
  const auto it = std::find(names.begin(), names.end(), metric.set);
  return it == names.end() ? 0 : static_cast<size_t>(it - names.begin());
}

std::string to_string(const EvalMetricRef& v) {
  if (v.kind == EvalMetric::none || v.set.empty()) return to_string(v.kind);
  return "eval." + v.set + (v.kind == EvalMetric::eval_loss ? ".loss" : ".accuracy");
}

bool measures_grad_amax(const RunConfig& config) {
  return config.logging.grad_amax ||
         (amp::scale_rule(config.scaler.policy).reads_amax && scaler_enabled(config));
}

DType half_dtype(Precision precision) {
  return precision == Precision::bf16 ? DType::bf16 : DType::f16;
}

amp::ScaleUpdateParams scale_settings(const RunConfig& config) {
  const ScalerConfig& s = config.scaler;
  amp::ScaleUpdateParams p;
  p.policy = s.policy;
  p.growth_factor = s.growth_factor;
  p.backoff_factor = s.backoff_factor;
  // The field table bounds the integers: growth_interval and hysteresis to int32, margin to
  // [0, 64], amax_history to [1, amp::kMaxAmaxHistory].
  p.growth_interval = static_cast<int32_t>(s.growth_interval);
  p.hysteresis = static_cast<int32_t>(s.hysteresis);
  p.min_scale = static_cast<float>(s.min_scale);
  p.max_scale = static_cast<float>(s.max_scale);
  p.consecutive_hysteresis = s.consecutive_hysteresis;
  p.tolerance = s.tolerance;
  p.margin = static_cast<int32_t>(s.margin);
  p.amax_history = static_cast<int32_t>(s.amax_history);
  p.max_finite = static_cast<float>(max_finite(half_dtype(config.precision)));
  return p;
}

namespace {

// ---- string checks ----

std::string non_empty(const std::string& s) {
  return s.empty() ? "must not be empty" : "";
}

std::string any_string(const std::string&) {
  return "";
}

// The run directory is runs/<name>: one path component.
std::string check_name(const std::string& s) {
  if (s.empty()) return "must not be empty";
  if (s == "." || s == "..") return "must not be '.' or '..'";
  if (s.size() > 200) return "must be at most 200 characters";
  for (char c : s) {
    if (c == '/' || c == '\\') return "must not contain '/' or '\\' (it names a directory)";
    if (static_cast<unsigned char>(c) < 0x20) return "must not contain control characters";
  }
  return {};
}

std::string check_device(const std::string& s) {
  if (s == "auto" || s == "cpu" || s == "cuda") return {};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos) {
    return {};
  }
  return "must be auto, cpu, cuda or cuda:N, got " + s;
}

// ---- fields of this module's own types ----

// scaler.enabled: auto | true | false (the bools plain, as YAML writes them).
template <class T, class Get>
Field<T> toggle_field(std::string path, Get get, Toggle def, std::string help) {
  Field<T> f;
  f.path = std::move(path);
  f.help = std::move(help);
  f.set_default = [get, def](T& c) { get(c) = def; };
  f.read = [get](const FieldInput& in, T& c) {
    if (const std::optional<bool> b = read_bool(in.value)) {
      get(c) = *b ? Toggle::on : Toggle::off;
      return true;
    }
    if (in.value.is_scalar() && in.value.text == "auto") {
      get(c) = Toggle::automatic;
      return true;
    }
    in.fail("must be auto, true or false, got " + describe(in.value));
    return false;
  };
  f.emit = [get, help = f.help](const T& c, const std::string& full, std::vector<Leaf>& out) {
    const Toggle t = get(c);
    out.push_back({full,
                   t == Toggle::automatic ? nlohmann::ordered_json("auto")
                                          : nlohmann::ordered_json(t == Toggle::on),
                   help});
  };
  f.text = [get](const T& c) -> std::string { return to_string(get(c)); };
  f.type = "auto or bool";
  f.range = "auto, true, false";
  return f;
}

// csv label_column: a plain integer is an index, any other scalar a header name.
Field<DataSource> label_column_field(std::string help) {
  Field<DataSource> f;
  f.path = "label_column";
  f.help = std::move(help);
  f.set_default = [](DataSource& c) { c.label_column = {"", -1}; };
  f.read = [](const FieldInput& in, DataSource& c) {
    int64_t index = 0;
    if (read_int(in.value, index) == ReadStatus::ok) {
      c.label_column = {"", index};
      return true;
    }
    if (!in.value.is_scalar() || is_plain_null(in.value) || in.value.text.empty()) {
      in.fail("expected a column name or index, got " + describe(in.value));
      return false;
    }
    if (std::string message = utf8_problem(in.value.text); !message.empty()) {
      in.fail(std::move(message));
      return false;
    }
    c.label_column = {in.value.text, 0};
    return true;
  };
  f.emit = [help = f.help](const DataSource& c, const std::string& full, std::vector<Leaf>& out) {
    const LabelColumn& l = c.label_column;
    out.push_back(
        {full, l.name.empty() ? nlohmann::ordered_json(l.index) : nlohmann::ordered_json(l.name),
         help});
  };
  f.type = "string or int";
  f.range = "a header name, or a column index";
  return f;
}

// ---- data sources ----

// A language-model source's own hold-out (data.train.split_fraction), as nanoGPT's 90/10.
constexpr double kLmSplitFraction = 0.1;

enum class Role { train, eval };

Schema<DataSource> make_source_schema(Role role) {
  using S = DataSource;
  const auto kSynthetic = std::vector<std::string>{"synthetic"};
  std::vector<Field<S>> fields = {
      enum_field<S>(AMPCTL_KEY(source), SourceKind::synthetic, kSource,
                    "synthetic | idx | fashion_mnist | csv | text | tokens",
                    {SourceKind::synthetic, SourceKind::idx, SourceKind::fashion_mnist,
                     SourceKind::csv, SourceKind::text, SourceKind::tokens}),
      enum_field<S>(AMPCTL_KEY(task), Task::classification, kTask, "classification | regression")
          .when("source", {"synthetic", "csv"}),
      int_field<S>(AMPCTL_KEY(samples), 8192, {1, kInt32Max}, "examples generated")
          .when("source", kSynthetic),
      int_field<S>(AMPCTL_KEY(features), 32, {1, kInt32Max}, "input width")
          .when("source", kSynthetic),
      int_field<S>(AMPCTL_KEY(classes), 10, {2, kInt32Max}, "output classes (>= 2)")
          .when("source", kSynthetic)
          .when("task", {"classification"}),
      string_field<S>(AMPCTL_KEY(images), "", non_empty, "MNIST-format images file (.gz accepted)")
          .when("source", {"idx"})
          .require(),
      string_field<S>(AMPCTL_KEY(labels), "", non_empty, "MNIST-format labels file (.gz accepted)")
          .when("source", {"idx"})
          .require(),
      enum_field<S>(
          AMPCTL_KEY(split), role == Role::eval ? DatasetSplit::test : DatasetSplit::train, kSplit,
          role == Role::eval ? "train | test (default test for data.eval)" : "train | test")
          .when("source", {"fashion_mnist"}),
      string_field<S>(AMPCTL_KEY(dir), "/usr/share/datasets/fashion-mnist", non_empty,
                      "folder with the four Fashion-MNIST idx files")
          .when("source", {"fashion_mnist"}),
      string_field<S>(AMPCTL_KEY(path), "", non_empty,
                      "csv: numeric features and a label; text: a UTF-8 (or any, with vocab: "
                      "byte) text file; tokens: a token .bin file")
          .when("source", {"csv", "text", "tokens"})
          .require(),
      label_column_field("header name, or index (negative from the end; -1 = last)")
          .when("source", {"csv"}),
      bool_field<S>(AMPCTL_KEY(header), true, "the first row names the columns")
          .when("source", {"csv"}),
      enum_field<S>(AMPCTL_KEY(vocab), VocabKind::character, kVocab,
                    "char (the file's distinct characters, sorted) | byte (the 256 byte values)")
          .when("source", {"text"}),
      string_field<S>(AMPCTL_KEY(tokenizer), "", any_string,
                      "a byte-level BPE tokenizer (tokenizer.json, a folder holding one, or "
                      "GPT-2's vocab.json) that encodes the text instead of vocab; empty: none")
          .when("source", {"text"}),
      int_field<S>(AMPCTL_KEY(vocab_size), 0, {1, kInt32Max},
                   "token ids are < vocab_size (the model's vocabulary; GPT-2: 50257, padded "
                   "50304)")
          .when("source", {"tokens"})
          .require(),
      enum_field<S>(
          "format", [](auto& c) -> auto& { return c.token_format; }, TokenFormat::automatic,
          kTokenFormat,
          "auto (llm.c's header when the file starts with its magic, else raw) | raw "
          "(nanoGPT's little-endian uint16) | llmc (256 x int32 header) | u32 (raw "
          "little-endian uint32, as ampctl tokenize writes for vocabularies above 65536)")
          .when("source", {"tokens"}),
  };
  if (role == Role::train) {
    fields.push_back(float_field<S>(AMPCTL_KEY(split_fraction), kLmSplitFraction,
                                    FloatRange::closed_open(0.0, 1.0),
                                    "hold out the last part of the file for evaluation when "
                                    "data.eval is null (0 = none)")
                         .when("source", {"text", "tokens"}));
  }
  std::vector<Check<S>> checks = {
      {{"tokenizer", "vocab"},
       [](const S& c) -> std::string {
         if (c.source != SourceKind::text || c.tokenizer.empty() || c.vocab != VocabKind::byte) {
           return {};
         }
         return "a tokenizer gives the vocabulary: leave vocab out (vocab: byte reads bytes "
                "without one)";
       }},
      {{"label_column", "header"},
       [](const S& c) -> std::string {
         if (c.source != SourceKind::csv || c.label_column.name.empty() || c.header) return {};
         return "a column name needs header: true; give an index instead";
       }},
  };
  Schema<S> schema(std::move(fields), std::move(checks));
  if (role == Role::eval) {
    schema.unknown_key_hint = [](const std::string& key) -> std::string {
      if (key != "split_fraction") return {};
      return "split_fraction is a form of its own: 'eval: {split_fraction: 0.1}', no other key";
    };
  }
  return schema;
}

const Schema<DataSource>& train_schema() {
  static const Schema<DataSource> schema = make_source_schema(Role::train);
  return schema;
}

const Schema<DataSource>& eval_schema() {
  static const Schema<DataSource> schema = make_source_schema(Role::eval);
  return schema;
}

// data.eval: {split_fraction: F} holds out part of data.train instead of naming a source.
const Schema<DataSource>& split_schema() {
  static const Schema<DataSource> schema = [] {
    using S = DataSource;
    Schema<S> s({float_field<S>(AMPCTL_KEY(split_fraction), 0.1, FloatRange::open(0.0, 1.0),
                                "hold out this part of data.train for evaluation")});
    s.preset = [](S& c, const Value&) {
      eval_schema().set_defaults(c);
      c.source = SourceKind::split;
    };
    s.unknown_key_hint = [](const std::string&) -> std::string {
      return "'eval: {split_fraction: F}' takes no other key; for a separate evaluation set "
             "give a source instead";
    };
    return s;
  }();
  return schema;
}

bool read_source(const FieldInput& in, const Schema<DataSource>& schema, DataSource& out) {
  if (!in.value.is_map() && !is_plain_null(in.value)) {
    in.fail("expected a mapping with a source, got " + describe(in.value),
            "for example {source: synthetic, samples: 8192}");
    return false;
  }
  const size_t before = in.state.problems.size();
  schema.parse(in.value, in.key + ".", out, in.state);
  return in.state.problems.size() == before;
}

Field<RunConfig> train_source_field(std::string help) {
  Field<RunConfig> f;
  f.path = "data.train";
  f.help = std::move(help);
  f.set_default = [](RunConfig& c) { train_schema().set_defaults(c.data.train); };
  f.read = [](const FieldInput& in, RunConfig& c) {
    return read_source(in, train_schema(), c.data.train);
  };
  f.emit = [](const RunConfig& c, const std::string& full, std::vector<Leaf>& out) {
    train_schema().emit(c.data.train, full + ".", out);
  };
  f.document = [help = f.help](const std::string& full, std::vector<KeyDoc>& out) {
    out.push_back({full, "source", "{source: synthetic}", "a mapping: the keys below", "", help});
    train_schema().document(full + ".", out);
  };
  return f;
}

// data.eval's set names: [A-Za-z0-9_-]+, at most kMaxEvalSets sets.
constexpr size_t kMaxEvalSets = 8;

std::string eval_set_name_problem(const std::string& name) {
  if (name.empty()) return "an evaluation set's name is empty";
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') {
      return "an evaluation set's name is letters, digits, '_' and '-', got '" + name + "'";
    }
  }
  return {};
}

// data.eval's map form: a non-empty mapping whose every value is a mapping (a source's keys are
// scalars, so the two forms cannot be confused).
bool is_named_eval_map(const Value& v) {
  if (!v.is_map() || v.entries.empty()) return false;
  return std::all_of(v.entries.begin(), v.entries.end(),
                     [](const Value::Entry& e) { return e.value.is_map(); });
}

// One named set: a source, or {split_fraction: F} for the first set only.
bool read_named_eval(const FieldInput& in, const Value::Entry& e, bool first, DataSource& out) {
  const std::string key = in.key + "." + e.key;
  const FieldInput sub{e.value, key, e.key_where, in.state};
  const bool split = e.value.find("split_fraction") != nullptr && e.value.find("source") == nullptr;
  if (split && !first) {
    sub.fail(
        "{split_fraction: F} may only be the first evaluation set (it decides what "
        "data.train keeps)",
        "put this set first, or give it a source");
    return false;
  }
  return read_source(sub, split ? split_schema() : eval_schema(), out);
}

void emit_eval_source(const DataSource& source, const std::string& full, std::vector<Leaf>& out) {
  if (source.source == SourceKind::split) {
    split_schema().emit(source, full + ".", out);
  } else {
    eval_schema().emit(source, full + ".", out);
  }
}

Field<RunConfig> eval_source_field(std::string help) {
  Field<RunConfig> f;
  f.path = "data.eval";
  f.help = std::move(help);
  f.set_default = [](RunConfig& c) {
    c.data.eval.reset();
    c.data.eval_name.clear();
    c.data.eval_sets.clear();
  };
  f.read = [](const FieldInput& in, RunConfig& c) {
    c.data.eval_name.clear();
    c.data.eval_sets.clear();
    if (is_plain_null(in.value)) {
      c.data.eval.reset();
      return true;
    }
    if (is_named_eval_map(in.value)) {
      bool ok = true;
      if (in.value.entries.size() > kMaxEvalSets) {
        in.fail("at most " + std::to_string(kMaxEvalSets) + " evaluation sets, got " +
                std::to_string(in.value.entries.size()));
        return false;
      }
      std::vector<std::string> seen;
      for (size_t i = 0; i < in.value.entries.size(); ++i) {
        const Value::Entry& e = in.value.entries[i];
        const std::string key = in.key + "." + e.key;
        if (std::string m = eval_set_name_problem(e.key); !m.empty()) {
          in.state.problems.add(e.key_where, key, std::move(m), "for example valid, test_2");
          ok = false;
          continue;
        }
        if (std::find(seen.begin(), seen.end(), e.key) != seen.end()) {
          in.state.problems.add(e.key_where, key, "a second evaluation set of this name");
          ok = false;
          continue;
        }
        seen.push_back(e.key);
        if (i == 0) {
          ok = read_named_eval(in, e, true, c.data.eval.emplace()) && ok;
          c.data.eval_name = e.key;
        } else {
          NamedEvalSource named{e.key, {}};
          ok = read_named_eval(in, e, false, named.source) && ok;
          c.data.eval_sets.push_back(std::move(named));
        }
      }
      return ok;
    }
    const bool split = in.value.is_map() && in.value.find("split_fraction") != nullptr &&
                       in.value.find("source") == nullptr;
    return read_source(in, split ? split_schema() : eval_schema(), c.data.eval.emplace());
  };
  f.emit = [help = f.help](const RunConfig& c, const std::string& full, std::vector<Leaf>& out) {
    if (!c.data.eval) {
      out.push_back({full, nullptr, help});
    } else if (c.data.eval_name.empty()) {
      emit_eval_source(*c.data.eval, full, out);
    } else {
      emit_eval_source(*c.data.eval, full + "." + c.data.eval_name, out);
      for (const NamedEvalSource& e : c.data.eval_sets) {
        emit_eval_source(e.source, full + "." + e.name, out);
      }
    }
  };
  f.document = [help = f.help](const std::string& full, std::vector<KeyDoc>& out) {
    out.push_back({full, "source or null", "null",
                   "null, a mapping: the keys below, or a map of NAME -> such a mapping", "",
                   help});
    eval_schema().document(full + ".", out);
    const size_t split_rows = out.size();
    split_schema().document(full + ".", out);
    for (size_t i = split_rows; i < out.size(); ++i) {
      out[i].applies = full + " is {split_fraction: F} (no other key)";
    }
  };
  return f;
}

// checkpoint.keep_best, training.early_stop.metric: none | eval_loss | eval_accuracy |
// eval.NAME.loss | eval.NAME.accuracy. Whether NAME is one of data.eval's sets is a check of
// its own (eval_metric_problem). For the keys' conditions the value reads as its kind.
Field<RunConfig> eval_metric_field(std::string path, EvalMetricRef& (*get)(RunConfig&),
                                   std::string help) {
  Field<RunConfig> f;
  f.path = std::move(path);
  f.help = std::move(help);
  f.set_default = [get](RunConfig& c) { get(c) = {}; };
  f.read = [get](const FieldInput& in, RunConfig& c) {
    const auto bad = [&in] {
      in.fail(
          "expected none, eval_loss, eval_accuracy, eval.NAME.loss or eval.NAME.accuracy, "
          "got " +
              describe(in.value),
          "NAME is one of data.eval's sets");
      return false;
    };
    if (!in.value.is_scalar() || is_plain_null(in.value)) return bad();
    const std::string& t = in.value.text;
    for (const auto& [e, name] : kEvalMetric) {
      if (t == name) {
        get(c) = {e, ""};
        return true;
      }
    }
    const auto ends = [&t](std::string_view tail) {
      return t.size() > tail.size() && t.compare(t.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (t.rfind("eval.", 0) != 0) return bad();
    EvalMetricRef r;
    std::string rest = t.substr(5);
    if (ends(".loss")) {
      r.kind = EvalMetric::eval_loss;
      rest.resize(rest.size() - 5);
    } else if (ends(".accuracy")) {
      r.kind = EvalMetric::eval_accuracy;
      rest.resize(rest.size() - 9);
    } else {
      return bad();
    }
    if (!eval_set_name_problem(rest).empty()) return bad();
    r.set = rest;
    get(c) = r;
    return true;
  };
  f.emit = [get, help = f.help](const RunConfig& c, const std::string& full,
                                std::vector<Leaf>& out) {
    out.push_back({full, to_string(get(const_cast<RunConfig&>(c))), help});
  };
  f.text = [get](const RunConfig& c) {
    return std::string(to_string(get(const_cast<RunConfig&>(c)).kind));
  };
  f.type = "string";
  f.range = "none, eval_loss, eval_accuracy, eval.NAME.loss, eval.NAME.accuracy";
  return f;
}

// model.conv: a list of [channels, kernel] pairs, each value in `range`, at least one pair.
template <class T, class Get>
Field<T> conv_blocks_field(std::string path, Get get, std::vector<std::array<int64_t, 2>> def,
                           IntRange range, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, std::move(def), std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    if (!in.value.is_list() || in.value.items.empty()) {
      in.fail("expected a non-empty list of [channels, kernel] pairs, got " + describe(in.value),
              "e.g. [[32, 3], [64, 3]]");
      return false;
    }
    std::vector<std::array<int64_t, 2>> values(in.value.items.size());
    bool ok = true;
    for (size_t i = 0; i < values.size(); ++i) {
      const Value& item = in.value.items[i];
      if (!item.is_list() || item.items.size() != 2) {
        in.fail_item(item, i, "expected a [channels, kernel] pair, got " + describe(item),
                     "e.g. [32, 3]");
        ok = false;
        continue;
      }
      for (size_t j = 0; j < 2; ++j) {
        ok = detail::read_int_value(in, item.items[j], range, values[i][j], i) && ok;
      }
    }
    if (ok) get(c) = std::move(values);
    return ok;
  };
  detail::emit_as_json(f, get);
  f.type = "list of [int, int]";
  f.range = "each " + range.describe();
  return f;
}

// The scaler's settings: every scaler.* key but the switch itself and the two that have rules
// of their own with the scaler off (on_overflow, on_min_scale).
bool is_scaler_setting(const std::string& path) {
  return path.rfind("scaler.", 0) == 0 && path != "scaler.enabled" &&
         path != "scaler.on_overflow" && path != "scaler.on_min_scale";
}

// A metric the run's evaluations do not give ("" when they do).
std::string eval_metric_problem(const RunConfig& c, const EvalMetricRef& ref) {
  const EvalMetric m = ref.kind;
  if (m == EvalMetric::none) return {};
  if (!has_eval_data(c)) {
    return to_string(ref) + " needs evaluations, and the run has no evaluation data: set data.eval";
  }
  if (!ref.set.empty()) {
    const std::vector<std::string> names = eval_set_names(c);
    if (std::find(names.begin(), names.end(), ref.set) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      return to_string(ref) + ": data.eval has no set '" + ref.set + "' (its sets: " + list + ")";
    }
  }
  if (m == EvalMetric::eval_accuracy &&
      (is_language_model(c.data.train) || task_of(c.data.train) != Task::classification)) {
    return to_string(ref) +
           " needs a classification task (a language model or a regression has no accuracy): "
           "use " +
           (ref.set.empty() ? std::string("eval_loss") : "eval." + ref.set + ".loss");
  }
  return {};
}

// ---- the table, in the order of docs/reference.md's listing ("Configuration") ----

Schema<RunConfig> make_run_schema() {
  using C = RunConfig;
  const auto kAdam = std::vector<std::string>{"adam", "adamw"};
  const auto kSgd = std::vector<std::string>{"sgd"};
  const auto kOneCycle = std::vector<std::string>{"onecycle"};
  const auto kMlp = std::vector<std::string>{"mlp"};
  const auto kGpt = std::vector<std::string>{"gpt"};
  const auto kMlpCnn = std::vector<std::string>{"mlp", "cnn"};
  std::vector<Field<C>> fields = {
      string_field<C>(AMPCTL_KEY(name), "", check_name,
                      "run name (default: the config file's stem); runs/<name>")
          .derive([](C& c, const ParseState& s) { c.name = s.default_name; }),
      int_field<C>(AMPCTL_KEY(seed), 0, {0, INT64_MAX}, "one seed drives init, shuffling, dropout"),
      string_field<C>(AMPCTL_KEY(device), "auto", check_device,
                      "auto | cpu | cuda | cuda:N (auto: a usable GPU, else cpu)"),
      enum_field<C>(AMPCTL_KEY(precision), Precision::fp16, kPrecision, "fp16 | bf16 | fp32"),

      enum_field<C>(AMPCTL_KEY(model.type), ModelType::mlp, kModelType,
                    "mlp | gpt (GPT-2 as nanoGPT writes it) | cnn"),
      int_list_field<C>(AMPCTL_KEY(model.hidden), {256, 256}, {1, kInt32Max},
                        "hidden layer widths (default: [256, 256]; [128] for a cnn); input/output "
                        "sizes come from the data")
          .when("model.type", kMlpCnn)
          .derive([](C& c, const ParseState&) {
            // The cnn's head defaults to one hidden layer of 128 (docs/reference.md, "The CNN").
            if (c.model.type == ModelType::cnn) c.model.hidden = {128};
          }),
      enum_field<C>(AMPCTL_KEY(model.activation), Activation::relu, kActivation,
                    "relu | gelu | tanh")
          .when("model.type", kMlpCnn),
      float_field<C>(AMPCTL_KEY(model.dropout), 0.0, FloatRange::closed_open(0.0, 1.0),
                     "dropout probability, in [0, 1): after each hidden activation (mlp, cnn); on "
                     "the embeddings, attention weights and both residual branches (gpt)"),
      bool_field<C>(AMPCTL_KEY(model.layer_norm), false, "LayerNorm after each hidden Linear")
          .when("model.type", kMlp),
      int_field<C>(AMPCTL_KEY(model.n_layer), 12, {1, 1024}, "transformer blocks")
          .when("model.type", kGpt),
      int_field<C>(AMPCTL_KEY(model.n_head), 12, {1, 1024}, "attention heads; must divide n_embd")
          .when("model.type", kGpt),
      int_field<C>(AMPCTL_KEY(model.n_embd), 768, {1, 65536}, "the residual stream's width")
          .when("model.type", kGpt),
      int_field<C>(AMPCTL_KEY(model.block_size), 1024, {1, 65536},
                   "context length: the longest sequence, and the training windows' length")
          .when("model.type", kGpt),
      bool_field<C>(AMPCTL_KEY(model.bias), true, "biases in every Linear and LayerNorm")
          .when("model.type", kGpt),
      bool_field<C>(AMPCTL_KEY(model.tie_embeddings), true,
                    "the LM head reads transformer.wte.weight (false: its own lm_head.weight)")
          .when("model.type", kGpt),
      conv_blocks_field<C>(AMPCTL_KEY(model.conv), {{32, 3}, {64, 3}}, {1, 65536},
                           "cnn: conv blocks [channels, kernel] (padding kernel // 2, stride 1)")
          .when("model.type", {"cnn"}),
      int_field<C>(AMPCTL_KEY(model.pool), 2, {1, 65536},
                   "cnn: MaxPool2d(pool) after each conv block; 1 = no pooling")
          .when("model.type", {"cnn"}),
      bool_field<C>(AMPCTL_KEY(model.batch_norm), false,
                    "cnn: BatchNorm2d after each conv (the conv then has no bias)")
          .when("model.type", {"cnn"}),

      enum_field<C>(AMPCTL_KEY(loss), LossType::cross_entropy, kLoss,
                    "cross_entropy | mse (default follows data.train's task)")
          .derive([](C& c, const ParseState&) {
            c.loss =
                task_of(c.data.train) == Task::regression ? LossType::mse : LossType::cross_entropy;
          }),

      train_source_field("the training data: one of the sources"),
      eval_source_field("null, a source like data.train, {split_fraction: F}, or a map of up to "
                        "8 named sets NAME -> such a source (the first set's values are "
                        "eval_loss's; docs/reference.md, \"Evaluation sets\")"),
      int_field<C>(AMPCTL_KEY(data.batch_size), 128, {1, kInt32Max},
                   "examples per micro-batch on each rank (nanoGPT's batch_size); the global "
                   "batch is batch_size x ranks x grad_accum_steps"),
      bool_field<C>(AMPCTL_KEY(data.shuffle), true, "reshuffle the training set every epoch"),
      bool_field<C>(AMPCTL_KEY(data.drop_last), true, "drop the last incomplete batch"),
      bool_field<C>(AMPCTL_KEY(data.normalize), true,
                    "standardise features with the training set's mean/std"),

      enum_field<C>(AMPCTL_KEY(optimizer.type), OptimizerType::adamw, kOptimizer,
                    "sgd | adam | adamw (PyTorch semantics)"),
      float_field<C>(AMPCTL_KEY(optimizer.lr), 1e-3, FloatRange::at_least(0.0), "learning rate"),
      float_field<C>(AMPCTL_KEY(optimizer.weight_decay), 0.0, FloatRange::at_least(0.0),
                     "L2 (sgd, adam) or decoupled (adamw) weight decay (default: 0.01 for "
                     "adamw, 0 for sgd and adam, as in PyTorch)")
          .derive([](C& c, const ParseState&) {
            c.optimizer.weight_decay = c.optimizer.type == OptimizerType::adamw ? 0.01 : 0.0;
          }),
      enum_field<C>(AMPCTL_KEY(optimizer.decay_on), DecayOn::all, kDecayOn,
                    "all | matrices (weight decay only on tensors of >= 2 dims: nanoGPT's "
                    "groups, no decay on biases and LayerNorm weights)"),
      float_pair_field<C>(AMPCTL_KEY(optimizer.betas), {0.9, 0.999},
                          FloatRange::closed_open(0.0, 1.0), "each in [0, 1)")
          .when("optimizer.type", kAdam),
      float_field<C>(AMPCTL_KEY(optimizer.eps), 1e-8, FloatRange::above(0.0).in_f32(),
                     "> 0 (a normal float32)")
          .when("optimizer.type", kAdam),
      float_field<C>(AMPCTL_KEY(optimizer.momentum), 0.0, FloatRange::at_least(0.0), ">= 0")
          .when("optimizer.type", kSgd),
      float_field<C>(AMPCTL_KEY(optimizer.dampening), 0.0, FloatRange::at_least(0.0),
                     "momentum dampening, >= 0")
          .when("optimizer.type", kSgd),
      bool_field<C>(AMPCTL_KEY(optimizer.nesterov), false,
                    "Nesterov momentum (needs momentum > 0, dampening 0)")
          .when("optimizer.type", kSgd),

      enum_field<C>(AMPCTL_KEY(scheduler.type), SchedulerType::constant, kScheduler,
                    "constant | linear | cosine | step | onecycle"),
      int_field<C>(AMPCTL_KEY(scheduler.warmup_steps), 0, {0, INT64_MAX},
                   "linear warm-up from 0 to lr over the first steps")
          .when("scheduler.type", {"constant", "linear", "cosine", "step"}),
      float_field<C>(AMPCTL_KEY(scheduler.min_lr), 0.0, FloatRange::at_least(0.0),
                     "lr at the last step after warm-up (PyTorch's eta_min)")
          .when("scheduler.type", {"linear", "cosine"}),
      int_field<C>(AMPCTL_KEY(scheduler.decay_steps), 0, {0, kMaxSteps},
                   "steps the schedule decays over (nanoGPT's lr_decay_iters), then holds its "
                   "last lr; 0 = training.max_steps. Set it to keep the decay when a resume "
                   "extends training.max_steps")
          .when("scheduler.type", {"linear", "cosine", "onecycle"}),
      int_field<C>(AMPCTL_KEY(scheduler.step_size), 100, {1, INT64_MAX},
                   "StepLR: multiply lr by gamma every step_size steps after warm-up")
          .when("scheduler.type", {"step"}),
      float_field<C>(AMPCTL_KEY(scheduler.gamma), 0.1, FloatRange::above(0.0),
                     "StepLR: the factor, > 0")
          .when("scheduler.type", {"step"}),
      float_field<C>(AMPCTL_KEY(scheduler.max_lr), 1e-3, FloatRange::at_least(0.0),
                     "OneCycleLR: peak lr (default: optimizer.lr)")
          .when("scheduler.type", kOneCycle)
          .derive([](C& c, const ParseState&) { c.scheduler.max_lr = c.optimizer.lr; }),
      float_field<C>(AMPCTL_KEY(scheduler.pct_start), 0.3, FloatRange::open(0.0, 1.0),
                     "OneCycleLR: fraction of the steps spent increasing lr")
          .when("scheduler.type", kOneCycle),
      float_field<C>(AMPCTL_KEY(scheduler.div_factor), 25.0, FloatRange::above(0.0),
                     "OneCycleLR: initial lr = max_lr / div_factor")
          .when("scheduler.type", kOneCycle),
      float_field<C>(AMPCTL_KEY(scheduler.final_div_factor), 1e4, FloatRange::above(0.0),
                     "OneCycleLR: final lr = initial lr / final_div_factor")
          .when("scheduler.type", kOneCycle),
      enum_field<C>(AMPCTL_KEY(scheduler.anneal_strategy), AnnealStrategy::cos, kAnneal,
                    "OneCycleLR: cos | linear")
          .when("scheduler.type", kOneCycle),
      bool_field<C>(AMPCTL_KEY(scheduler.three_phase), false,
                    "OneCycleLR: a third phase down to the final lr")
          .when("scheduler.type", kOneCycle),
      bool_field<C>(AMPCTL_KEY(scheduler.cycle_momentum), true,
                    "OneCycleLR: cycle SGD's momentum or Adam's beta1 inversely to the lr")
          .when("scheduler.type", kOneCycle),
      float_field<C>(AMPCTL_KEY(scheduler.base_momentum), 0.85, FloatRange::closed_open(0.0, 1.0),
                     "OneCycleLR: the momentum (beta1) at max_lr, in [0, 1)")
          .when("scheduler.type", kOneCycle),
      float_field<C>(AMPCTL_KEY(scheduler.max_momentum), 0.95, FloatRange::closed_open(0.0, 1.0),
                     "OneCycleLR: the momentum (beta1) at the lowest lr, in [0, 1)")
          .when("scheduler.type", kOneCycle),

      toggle_field<C>(AMPCTL_KEY(scaler.enabled), Toggle::automatic,
                      "auto | true | false (auto: on for fp16, off for bf16/fp32)"),
      enum_field<C>(AMPCTL_KEY(scaler.policy), amp::ScalePolicy::pytorch, kScalePolicy,
                    scale_rule_names(" | ") +
                        ": whose loss-scale update rule; auto sets it from the measured grad_amax "
                        "(docs/reference.md, \"Scale rules\")"),
      float_field<C>(AMPCTL_KEY(scaler.init_scale), 65536.0, FloatRange::above(0.0).in_f32(),
                     "> 0 and a normal float32 (its reciprocal finite)"),
      float_field<C>(AMPCTL_KEY(scaler.growth_factor), 2.0, FloatRange::above(1.0).in_f32(), "> 1"),
      float_field<C>(AMPCTL_KEY(scaler.backoff_factor), 0.5, FloatRange::open(0.0, 1.0).in_f32(),
                     "in (0, 1)"),
      int_field<C>(AMPCTL_KEY(scaler.growth_interval), 2000, {1, kInt32Max}, "integer >= 1"),
      int_field<C>(AMPCTL_KEY(scaler.hysteresis), 1, {1, kInt32Max},
                   ">= 1; overflows absorbed before a backoff (1 = PyTorch; DeepSpeed's "
                   "delayed_shift)")
          .when("scaler.policy", rules_reading(amp::kSetsHysteresis)),
      bool_field<C>(AMPCTL_KEY(scaler.consecutive_hysteresis), false,
                    "DeepSpeed: every overflow-free step refills the hysteresis (not only a "
                    "growth)")
          .when("scaler.policy", rules_reading(amp::kSetsConsecutiveHysteresis)),
      float_field<C>(AMPCTL_KEY(scaler.tolerance), 0.0, FloatRange::closed(0.0, 1.0),
                     "fairseq: the fraction of steps since the last rescale that may overflow "
                     "before a backoff, in [0, 1]")
          .when("scaler.policy", rules_reading(amp::kSetsTolerance)),
      int_field<C>(AMPCTL_KEY(scaler.margin), 1, {0, 64},
                   "auto: headroom kept above the measured grad_amax, as a power of two: the scale "
                   "is the largest power of two with grad_amax x scale x 2^margin within the "
                   "half type's range, in [0, 64]")
          .when("scaler.policy", rules_reading(amp::kSetsMargin)),
      int_field<C>(AMPCTL_KEY(scaler.amax_history), 16, {1, amp::kMaxAmaxHistory},
                   "auto: how many updates' grad_amax the scale is set from (their max), in "
                   "[1, 4096]")
          .when("scaler.policy", rules_reading(amp::kSetsAmaxHistory)),
      float_field<C>(AMPCTL_KEY(scaler.min_scale), 0.0, FloatRange::at_least(0.0).in_f32(),
                     "backoff never goes below this (0 = no floor)"),
      float_field<C>(AMPCTL_KEY(scaler.max_scale), std::numeric_limits<double>::infinity(),
                     FloatRange::above(0.0).with_inf().in_f32(),
                     "growth never goes above this (>= min_scale; .inf = no cap)")
          .when("scaler.policy", rules_reading(amp::kSetsMaxScale)),
      enum_field<C>(AMPCTL_KEY(scaler.on_overflow), OnOverflow::skip, kOnOverflow,
                    "skip | retry: an overflowing step is skipped, or its micro-batches run again "
                    "(the same batch and dropout masks) at the backed-off scale"),
      int_field<C>(AMPCTL_KEY(scaler.max_retries), 2, {1, 1000},
                   "retries of an overflowing step before it is skipped, in [1, 1000]")
          .when("scaler.on_overflow", {"retry"}),
      enum_field<C>(AMPCTL_KEY(scaler.on_min_scale), OnMinScale::keep_going, kOnMinScale,
                    "continue | stop: stop (exit 1, with a checkpoint) at an overflow while the "
                    "scale is at scaler.min_scale (needs min_scale > 0)"),

      int_field<C>(AMPCTL_KEY(training.max_steps), 1000, {1, kMaxSteps},
                   "optimizer iterations, skipped ones included"),
      int_field<C>(AMPCTL_KEY(training.grad_accum_steps), 1, {1, kInt32Max},
                   "micro-batches per optimizer step on each rank (nanoGPT's "
                   "gradient_accumulation_steps is over all ranks: divide it by the rank count)"),
      int_field<C>(AMPCTL_KEY(training.global_batch), 0, {0, INT64_MAX},
                   "examples per optimizer step over all ranks; 0 = data.batch_size x ranks x "
                   "grad_accum_steps. When set, grad_accum_steps follows from it: global_batch / "
                   "(data.batch_size x ranks), refused when that does not divide"),
      nullable_float_field<C>(AMPCTL_KEY(training.grad_clip_norm), FloatRange::above(0.0),
                              "null, or clip the global norm of the UNSCALED gradients"),
      int_field<C>(AMPCTL_KEY(training.eval_every), 0, {0, INT64_MAX},
                   "steps; 0 = once at the end"),
      int_field<C>(AMPCTL_KEY(training.eval_batches), 50, {1, kInt32Max},
                   "language models: validation batches per evaluation (fixed seed, the same "
                   "batches every time)"),
      int_field<C>(AMPCTL_KEY(training.divergence_patience), 100, {0, INT64_MAX},
                   "stop (exit 1) after this many consecutive steps with a non-finite loss, or "
                   "overflowing at the scale floor; 0 = never"),
      eval_metric_field(
          "training.early_stop.metric",
          [](C& c) -> EvalMetricRef& { return c.training.early_stop.metric; },
          "none | eval_loss | eval_accuracy (the first evaluation set's) | "
          "eval.NAME.loss | eval.NAME.accuracy (data.eval's set NAME): stop the run "
          "(status ok, with a checkpoint) when this has not improved in `patience` "
          "evaluations"),
      int_field<C>(AMPCTL_KEY(training.early_stop.patience), 5, {1, INT64_MAX},
                   "evaluations in a row without an improvement before the run stops, >= 1")
          .when("training.early_stop.metric", {"eval_loss", "eval_accuracy"}),
      float_field<C>(AMPCTL_KEY(training.early_stop.min_delta), 0.0, FloatRange::at_least(0.0),
                     "the least change that counts as an improvement, >= 0")
          .when("training.early_stop.metric", {"eval_loss", "eval_accuracy"}),

      int_field<C>(AMPCTL_KEY(checkpoint.every_steps), 0, {0, INT64_MAX},
                   "a checkpoint every N steps; 0 = none but at_eval's, the end's (and on "
                   "SIGINT/SIGTERM)"),
      bool_field<C>(AMPCTL_KEY(checkpoint.at_eval), true,
                    "a checkpoint at every training.eval_every step too, after its evaluation"),
      int_field<C>(AMPCTL_KEY(checkpoint.keep_last), 3, {1, INT64_MAX},
                   "the newest checkpoints kept, >= 1 (older ones are removed, and the console "
                   "names them)"),
      eval_metric_field(
          "checkpoint.keep_best", [](C& c) -> EvalMetricRef& { return c.checkpoint.keep_best; },
          "none | eval_loss | eval_accuracy (the first evaluation set's) | "
          "eval.NAME.loss | eval.NAME.accuracy: also keep the checkpoint of the best "
          "evaluation by this metric, never pruned (a checkpoint is written at "
          "every evaluation that improves it)"),

      string_field<C>(AMPCTL_KEY(init.from), "", nullptr,
                      "start from these weights: an ampctl checkpoint or run directory, a "
                      "safetensors file (ampctl's names, or Hugging Face GPT-2's), or a directory "
                      "holding model.safetensors (export --format hf); \"\" = the model's own "
                      "initialisation. The optimizer, scaler, step and data start fresh"),
      bool_field<C>(AMPCTL_KEY(init.strict), true,
                    "every model tensor must be in init.from with its shape (nanoGPT's crop of "
                    "the position table and a vocabulary padded to a multiple of 64 aside); "
                    "false: missing tensors keep their initialisation, unexpected ones are "
                    "ignored, both listed"),

      int_field<C>(AMPCTL_KEY(logging.every_steps), 10, {1, INT64_MAX}, "console lines"),
      int_field<C>(AMPCTL_KEY(logging.metrics_every), 1, {1, INT64_MAX}, "metrics.jsonl lines"),
      bool_field<C>(AMPCTL_KEY(logging.profile), false,
                    "time each step by phase (summary.json phase_ms; on a GPU this waits for "
                    "the device at every phase boundary, so it slows the step)"),
      int_field<C>(AMPCTL_KEY(logging.numerics_every), 0, {0, INT64_MAX},
                   "count gradient underflow, subnormals and headroom per tensor every N steps "
                   "(metrics.jsonl numerics lines, summary scale_advice; fp16/bf16); 0 = off"),
      bool_field<C>(AMPCTL_KEY(logging.grad_amax), true,
                    "grad_amax on every train line, wherever it is measured (fp16/bf16; MLP, "
                    "CNN, GPT): the largest |x| any rounding of the backward to fp16/bf16 saw, "
                    "which `ampctl replay` replays"),
      bool_field<C>(AMPCTL_KEY(logging.tensorboard), false,
                    "also write TensorBoard scalars (events.out.tfevents.* in the run directory)"),

      enum_field<C>(AMPCTL_KEY(distributed.backend), DistBackend::automatic, kDistBackend,
                    "collectives with several ranks: auto (nccl on cuda, mpi on cpu) | nccl | "
                    "mpi"),
      // At most 1 TiB: a bucket larger than every gradient is one bucket anyway, and the byte
      // count must fit size_t (1e30 MiB would not).
      float_field<C>(AMPCTL_KEY(distributed.bucket_mb), 25.0, {0.0, 1048576.0, true, false},
                     "gradient all-reduce bucket size in MiB"),
      int_field<C>(AMPCTL_KEY(distributed.zero), 0, {0, 1},
                   "ZeRO stage: 0 = every rank holds the whole optimizer state; 1 = the "
                   "optimizer moments are sharded over the ranks (gradients reduce-scattered, "
                   "parameters all-gathered)"),

      int_list_field<C>(AMPCTL_KEY(debug.inject_nonfinite_at), {}, {1, INT64_MAX},
                        "steps (1-based) whose gradients get a non-finite value"),
      enum_field<C>(AMPCTL_KEY(debug.inject_value), InjectValue::inf, kInject, "inf | nan"),
      string_field<C>(AMPCTL_KEY(debug.inject_tensor), "", nullptr,
                      "the parameter whose gradient gets the value (\"\" = layers.0.weight)"),
      int_field<C>(AMPCTL_KEY(debug.inject_rank), -1, {-1, INT64_MAX},
                   "with several ranks: only this rank's gradients get the value (-1 = every "
                   "rank)"),
  };

  std::vector<Check<C>> checks = {
      {{"model.n_head", "model.n_embd"},
       [](const C& c) -> std::string {
         if (c.model.type != ModelType::gpt || c.model.n_embd % c.model.n_head == 0) return {};
         return "must divide model.n_embd (" + std::to_string(c.model.n_embd) + "), got " +
                std::to_string(c.model.n_head);
       }},
      {{"loss", "data.train"},
       [](const C& c) -> std::string {
         const Task task = task_of(c.data.train);
         if (c.loss == LossType::cross_entropy && task == Task::regression) {
           return "cross_entropy needs a classification task, and data.train is regression";
         }
         if (c.loss == LossType::mse && task == Task::classification) {
           return "mse needs a regression task, and data.train is classification";
         }
         return {};
       }},
      {{"data.eval", "data.train"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source == SourceKind::split) return {};
         const Task eval = task_of(*c.data.eval), train = task_of(c.data.train);
         if (eval == train) return {};
         return std::string("is a ") + to_string(eval) + " source, and data.train is " +
                to_string(train);
       }},
      {{"data.eval", "data.train"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source == SourceKind::split) return {};
         const bool lm_train = is_language_model(c.data.train);
         if (lm_train == is_language_model(*c.data.eval) &&
             (!lm_train || c.data.eval->source == c.data.train.source)) {
           return {};
         }
         return std::string("is a ") + to_string(c.data.eval->source) +
                " source, and data.train is " + to_string(c.data.train.source) +
                (lm_train ? " (a language model evaluates on data of its training kind)" : "");
       }},
      {{"data.eval.vocab", "data.train.vocab"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source != SourceKind::text ||
             c.data.train.source != SourceKind::text || c.data.eval->vocab == c.data.train.vocab) {
           return {};
         }
         return std::string("must equal data.train.vocab (") + to_string(c.data.train.vocab) +
                "): the evaluation text is read with the training vocabulary";
       }},
      {{"data.eval.vocab_size", "data.train.vocab_size"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source != SourceKind::tokens ||
             c.data.train.source != SourceKind::tokens ||
             c.data.eval->vocab_size == c.data.train.vocab_size) {
           return {};
         }
         return "must equal data.train.vocab_size (" + std::to_string(c.data.train.vocab_size) +
                "), got " + std::to_string(c.data.eval->vocab_size);
       }},
      {{"data.train.split_fraction", "data.eval"},
       [](const C& c) -> std::string {
         if (!is_language_model(c.data.train) || !c.data.eval ||
             c.data.train.split_fraction == kLmSplitFraction) {
           return {};
         }
         return "applies only when data.eval is null; with data.eval set it is that key's to say "
                "what is evaluated ({split_fraction: F}, or a file)";
       }},
      {{"model.type", "data.train"},
       [](const C& c) -> std::string {
         const bool lm = is_language_model(c.data.train);
         if (lm && c.model.type != ModelType::gpt) {
           return std::string(to_string(c.model.type)) +
                  (c.model.type == ModelType::cnn ? " takes images; "
                                                  : " takes rows of features; ") +
                  to_string(c.data.train.source) +
                  " data (token windows) needs a language model (model.type: gpt)";
         }
         // A CNN reads the image shape [N, C, H, W] that only image sources give (train
         // refused the rest when it built the model; validate and a sweep's pre-check said ok).
         if (c.model.type == ModelType::cnn && !lm && c.data.train.source != SourceKind::idx &&
             c.data.train.source != SourceKind::fashion_mnist) {
           return std::string("cnn takes images [N, C, H, W], and data.train is a ") +
                  to_string(c.data.train.source) +
                  " source (rows of features); use data.train.source: idx or fashion_mnist, or "
                  "model.type: mlp";
         }
         if (!lm && c.model.type == ModelType::gpt) {
           return std::string("gpt takes token windows, and data.train is a ") +
                  to_string(c.data.train.source) +
                  " source (rows of features); a language model trains on data.train.source: "
                  "text or tokens";
         }
         return {};
       }},
      {{"data.eval.features", "data.train.features", "data.eval"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source != SourceKind::synthetic ||
             c.data.train.source != SourceKind::synthetic ||
             c.data.eval->features == c.data.train.features) {
           return {};
         }
         return "must equal data.train.features (" + std::to_string(c.data.train.features) +
                "), got " + std::to_string(c.data.eval->features);
       }},
      {{"data.eval.classes", "data.train.classes", "data.eval"},
       [](const C& c) -> std::string {
         if (!c.data.eval || c.data.eval->source != SourceKind::synthetic ||
             c.data.train.source != SourceKind::synthetic ||
             task_of(c.data.train) != Task::classification ||
             c.data.eval->classes == c.data.train.classes) {
           return {};
         }
         return "must equal data.train.classes (" + std::to_string(c.data.train.classes) +
                "), got " + std::to_string(c.data.eval->classes);
       }},
      {{"data.batch_size", "data.train.samples", "data.drop_last"},
       [](const C& c) -> std::string {
         if (c.data.train.source != SourceKind::synthetic || !c.data.drop_last ||
             c.data.batch_size <= c.data.train.samples) {
           return {};
         }
         return "must be <= data.train.samples (" + std::to_string(c.data.train.samples) +
                ") while data.drop_last is true (no batch would be left), got " +
                std::to_string(c.data.batch_size);
       }},
      {{"training.global_batch", "data.batch_size", "training.grad_accum_steps"},
       [](const C& c) -> std::string {
         const int64_t g = c.training.global_batch;
         if (g == 0) return {};
         if (g % c.data.batch_size != 0) {
           return "must be a multiple of data.batch_size (" + std::to_string(c.data.batch_size) +
                  ", the micro-batch per rank), got " + std::to_string(g);
         }
         // A derived accumulation (a resolved config of a run on some number of ranks) agrees;
         // an accumulation given beside it must too.
         if (c.training.grad_accum_steps != 1 &&
             g % (c.data.batch_size * c.training.grad_accum_steps) != 0) {
           return "training.grad_accum_steps (" + std::to_string(c.training.grad_accum_steps) +
                  ") follows from training.global_batch; " + std::to_string(g) +
                  " is not a multiple of data.batch_size x grad_accum_steps (leave "
                  "grad_accum_steps at 1)";
         }
         return {};
       }},
      {{"optimizer.nesterov", "optimizer.momentum", "optimizer.dampening"},
       [](const C& c) -> std::string {
         const OptimizerConfig& o = c.optimizer;
         if (o.type != OptimizerType::sgd || !o.nesterov || (o.momentum > 0 && o.dampening == 0)) {
           return {};
         }
         return "Nesterov momentum requires a momentum and zero dampening";
       }},
      {{"scheduler.min_lr", "optimizer.lr"},
       [](const C& c) -> std::string {
         const SchedulerType t = c.scheduler.type;
         if ((t != SchedulerType::linear && t != SchedulerType::cosine) ||
             c.scheduler.min_lr <= c.optimizer.lr) {
           return {};
         }
         return "must be <= optimizer.lr (" + format_float(c.optimizer.lr) + "), got " +
                format_float(c.scheduler.min_lr);
       }},
      {{"scheduler.warmup_steps", "training.max_steps", "scheduler.decay_steps"},
       [](const C& c) -> std::string {
         const SchedulerType t = c.scheduler.type;
         const int64_t steps = schedule_steps(c);
         if ((t != SchedulerType::linear && t != SchedulerType::cosine) ||
             c.scheduler.warmup_steps < steps) {
           return {};
         }
         const std::string of =
             c.scheduler.decay_steps > 0 ? "scheduler.decay_steps" : "training.max_steps";
         return "must be < " + of + " (" + std::to_string(steps) + ") for a " + to_string(t) +
                " schedule, got " + std::to_string(c.scheduler.warmup_steps);
       }},
      {{"checkpoint.keep_best", "data.eval"},
       [](const C& c) -> std::string { return eval_metric_problem(c, c.checkpoint.keep_best); }},
      {{"training.early_stop.metric", "data.eval"},
       [](const C& c) -> std::string {
         return eval_metric_problem(c, c.training.early_stop.metric);
       }},
      {{"training.early_stop.metric", "training.eval_every"},
       [](const C& c) -> std::string {
         if (c.training.early_stop.metric.kind == EvalMetric::none || c.training.eval_every > 0) {
           return {};
         }
         return "counts evaluations, and training.eval_every is 0 (one evaluation, at the end): "
                "set training.eval_every";
       }},
      {{"scaler.policy", "training.max_steps"},
       [](const C& c) -> std::string {
         // The rules' iteration counters are int32 on the device (amp_math.h).
         const amp::ScaleRule& rule = amp::scale_rule(c.scaler.policy);
         if (!amp::counts_iterations(rule) || c.training.max_steps <= kInt32Max) return {};
         return std::string("counts iterations in int32: ") + rule.name +
                " runs at most 2147483647 steps, training.max_steps is " +
                std::to_string(c.training.max_steps);
       }},
      {{"scaler.max_scale", "scaler.min_scale"},
       [](const C& c) -> std::string {
         if (c.scaler.max_scale >= c.scaler.min_scale) return {};
         return "must be >= scaler.min_scale (" + format_float(c.scaler.min_scale) + "), got " +
                format_float(c.scaler.max_scale);
       }},
      {{"scaler.init_scale", "scaler.min_scale", "scaler.max_scale"},
       [](const C& c) -> std::string {
         const ScalerConfig& s = c.scaler;
         if (s.max_scale < s.min_scale) return {};  // reported above
         if (s.init_scale < s.min_scale) {
           return "must be >= scaler.min_scale (" + format_float(s.min_scale) + "), got " +
                  format_float(s.init_scale);
         }
         if (s.init_scale > s.max_scale) {
           return "must be <= scaler.max_scale (" + format_float(s.max_scale) + "), got " +
                  format_float(s.init_scale);
         }
         return {};
       }},
      {{"scaler.policy", "scaler.enabled", "precision"},
       [](const C& c) -> std::string {
         const amp::ScaleRule& rule = amp::scale_rule(c.scaler.policy);
         if (!rule.reads_amax || !scaler_enabled(c) || c.precision != Precision::fp32) return {};
         return std::string(rule.name) +
                " sets the scale from grad_amax, the roundings of the backward to fp16 or "
                "bf16, but precision fp32 rounds nothing: use fp16 (or bf16), or another policy";
       }},
      {{"scaler.on_overflow", "scaler.enabled", "precision"},
       [](const C& c) -> std::string {
         if (c.scaler.on_overflow == OnOverflow::skip || scaler_enabled(c)) return {};
         return std::string(
                    "retry needs loss scaling (no step overflows without it), but "
                    "the scaler is off (precision ") +
                to_string(c.precision) + ", scaler.enabled " + to_string(c.scaler.enabled) + ")";
       }},
      {{"scaler.on_min_scale", "scaler.min_scale", "scaler.enabled", "precision"},
       [](const C& c) -> std::string {
         if (c.scaler.on_min_scale == OnMinScale::keep_going) return {};
         if (!scaler_enabled(c)) {
           return std::string("stop needs loss scaling, but the scaler is off (precision ") +
                  to_string(c.precision) + ", scaler.enabled " + to_string(c.scaler.enabled) + ")";
         }
         if (c.scaler.min_scale > 0) return {};
         return "stop needs a floor to stop at: set scaler.min_scale > 0 (it is 0)";
       }},
  };
  // data.eval's further sets: each checked against data.train by the rules of the first
  // (a set with the first's keys in its place), the problem named with the set's key.
  {
    std::vector<std::function<std::string(const C&)>> eval_rules;
    for (const Check<C>& check : checks) {
      if (!check.keys.empty() && check.keys[0].rfind("data.eval", 0) == 0) {
        eval_rules.push_back(check.test);
      }
    }
    checks.push_back({{"data.eval"}, [eval_rules](const C& c) -> std::string {
                        for (const NamedEvalSource& e : c.data.eval_sets) {
                          C one = c;
                          one.data.eval = e.source;
                          one.data.eval_sets.clear();
                          for (const auto& rule : eval_rules) {
                            if (std::string m = rule(one); !m.empty()) {
                              return "set " + e.name + ": " + m;
                            }
                          }
                        }
                        return {};
                      }});
  }
  // A scaler key with scaler.enabled: false is read by nothing: refused unless it holds its
  // default, as a key of another choice is (schema.h, pass 2), so no setting is silently
  // ignored. (With enabled: auto the precision turns the scaler off, and the same file runs
  // with it in fp16: train warns instead, unused_scaler_keys.) on_overflow and on_min_scale
  // have their own rules above.
  for (const Field<C>& f : fields) {
    if (!is_scaler_setting(f.path)) continue;
    checks.push_back({{f.path, "scaler.enabled"}, [f](const C& c) -> std::string {
                        if (c.scaler.enabled != Toggle::off) return {};
                        C fallback = c;
                        f.set_default(fallback);
                        const std::string def = yaml_text(f, fallback);
                        if (yaml_text(f, c) == def) return {};
                        return "only used with loss scaling, and scaler.enabled is false: remove "
                               "it or give its default (" +
                               def + "), or set scaler.enabled to auto or true";
                      }});
  }
  Schema<C> schema(std::move(fields), std::move(checks), {"model", "data"});
  schema.unknown_key_hint = [](const std::string& key) -> std::string {
    if (key != "sweep") return {};
    return "a sweep: section describes many runs: run it with `ampctl sweep --config FILE` "
           "(`ampctl validate` checks it too), or remove it to train the base configuration";
  };
  return schema;
}

const Schema<RunConfig>& run_schema() {
  static const Schema<RunConfig> schema = make_run_schema();
  return schema;
}

}  // namespace

std::vector<std::string> unused_scaler_keys(const RunConfig& config) {
  std::vector<std::string> out;
  if (scaler_enabled(config)) return out;
  for (const Field<RunConfig>& f : run_schema().fields()) {
    if (!is_scaler_setting(f.path)) continue;
    RunConfig fallback = config;
    f.set_default(fallback);
    const std::string now = yaml_text(f, config);
    if (now != yaml_text(f, fallback)) out.push_back(f.path + ": " + now);
  }
  return out;
}

namespace {

// ---- in and out ----

std::vector<Override> parse_overrides(const std::vector<std::string>& args) {
  std::vector<Override> overrides;
  for (const std::string& arg : args) overrides.push_back(parse_override(arg));
  return overrides;
}

std::string default_name_for(const std::string& origin) {
  const std::string stem = std::filesystem::path(origin).stem().string();
  return check_name(stem).empty() && utf8_problem(stem).empty() ? stem : "run";
}

std::filesystem::path absolute_or_empty(const std::filesystem::path& p) {
  std::error_code ec;
  std::filesystem::path a = std::filesystem::absolute(p, ec);
  return ec ? std::filesystem::path{} : a;
}

// Relative paths (docs/reference.md, "Paths"): every key that names a file or folder, read from
// the folder of the file that wrote it (a value with a position: the configuration file, one of
// its bases, or a sweep section's line) or, without a position (--set, --grid), from the current
// directory. Both become absolute here, so the resolved configuration (a run's config.yaml, a
// sweep run's copy, a checkpoint) names the same files wherever it is read again.
void resolve_path(Value::Entry* e, const std::filesystem::path& cwd) {
  if (e == nullptr || !e->value.is_scalar()) return;
  std::string& text = e->value.text;
  if (text.empty() ||
      (e->value.plain && (text == "null" || text == "~" || text == "Null" || text == "NULL"))) {
    return;  // the schema reports it (or, for init.from, means none)
  }
  const std::filesystem::path p(text);
  if (p.is_absolute()) return;
  const Where& said = e->value.where;
  std::filesystem::path folder = cwd;
  if (said.has_position()) {  // a file's folder ("run.yaml": the current directory's)
    const std::filesystem::path parent = std::filesystem::path(said.origin).parent_path();
    folder = parent.empty() ? cwd : absolute_or_empty(parent).lexically_normal();
  }
  text = (folder / p).lexically_normal().string();
  e->value.plain = false;
}

// The keys that name files and folders, each read by resolve_path from the folder of whoever
// wrote it (its key's Where): init.from and each data source's files.
void resolve_paths(Value& doc, const std::filesystem::path& cwd) {
  const auto resolve = [&](Value::Entry* e) { resolve_path(e, cwd); };
  if (Value::Entry* init = doc.find("init"); init != nullptr && init->value.is_map()) {
    resolve(init->value.find("from"));
  }
  Value::Entry* data = doc.find("data");
  if (data == nullptr || !data->value.is_map()) return;
  const auto resolve_source = [&](Value& source) {
    for (const char* key : {"path", "images", "labels", "dir", "tokenizer"}) {
      resolve(source.find(key));
    }
  };
  for (const char* role : {"train", "eval"}) {
    Value::Entry* source = data->value.find(role);
    if (source == nullptr || !source->value.is_map()) continue;
    if (std::string(role) == "eval" && is_named_eval_map(source->value)) {
      for (Value::Entry& set : source->value.entries) resolve_source(set.value);  // NAME -> source
    } else {
      resolve_source(source->value);
    }
  }
}

// A configuration file's text as one document: its YAML, its bases merged under it (base.h).
// False, with the problem added, when the text is no usable mapping or a base cannot be merged
// (a missing base, a cycle): the keys it would have given would only be reported missing.
bool read_document(std::string_view yaml, const std::string& origin, Value& doc,
                   Problems& problems) {
  if (!parse_yaml(yaml, origin, doc, problems)) return false;
  const size_t before = problems.size();
  merge_bases(doc, origin, problems);
  return problems.size() == before;
}

RunConfig validate(Value& doc, const std::string& default_name, Problems& problems) {
  // A base: left after merge_bases came from an override: bases are merged before them.
  for (auto it = doc.entries.begin(); it != doc.entries.end();) {
    if (it->key != "base") {
      ++it;
      continue;
    }
    problems.add(it->key_where, "base",
                 "only a configuration file names its bases (they are merged before --set)",
                 "write base: in the file, or give the other file's keys with --set");
    it = doc.entries.erase(it);
  }
  ParseState state{problems, doc.where, default_name, {}, {}};
  RunConfig config;
  run_schema().parse(doc, "", config, state);
  return config;
}

}  // namespace

RunConfig parse_config_said(std::string_view yaml, const std::string& origin,
                            const std::vector<SaidOverride>& overrides) {
  std::vector<Override> parsed;
  for (const SaidOverride& o : overrides) {
    parsed.push_back(parse_override(o.text));
    parsed.back().said = o.said;
  }
  Problems problems;
  Value doc;
  if (!read_document(yaml, origin, doc, problems)) problems.throw_if_any(ErrorKind::config);
  apply_overrides(doc, parsed, problems);
  resolve_paths(doc, absolute_or_empty(".").lexically_normal());
  RunConfig config = validate(doc, default_name_for(origin), problems);
  problems.throw_if_any(ErrorKind::config);
  return config;
}

struct ConfigTemplate::Impl {
  std::string origin;
  Value doc;
  Problems problems;  // what reading the text found in a usable document (every resolve's)
  std::filesystem::path cwd;
  mutable OverrideValues values;
};

ConfigTemplate::ConfigTemplate(std::string_view yaml, const std::string& origin)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->origin = origin;
  if (!read_document(yaml, origin, m_impl->doc, m_impl->problems)) {
    m_impl->problems.throw_if_any(ErrorKind::config);
  }
  m_impl->cwd = absolute_or_empty(".").lexically_normal();
}

ConfigTemplate::~ConfigTemplate() = default;

RunConfig ConfigTemplate::resolve(const std::vector<SaidOverride>& overrides) const {
  std::vector<Override> parsed;
  for (const SaidOverride& o : overrides) {
    parsed.push_back(parse_override(o.text));
    parsed.back().said = o.said;
  }
  Problems problems = m_impl->problems;
  Value doc = m_impl->doc;
  apply_overrides(doc, parsed, problems, &m_impl->values);
  resolve_paths(doc, m_impl->cwd);
  RunConfig config = validate(doc, default_name_for(m_impl->origin), problems);
  problems.throw_if_any(ErrorKind::config);
  return config;
}

RunConfig parse_config(std::string_view yaml, const std::string& origin,
                       const std::vector<std::string>& overrides) {
  std::vector<SaidOverride> said;
  for (const std::string& o : overrides) said.push_back({o, Where{}});
  return parse_config_said(yaml, origin, said);
}

std::string read_config_text(const std::filesystem::path& file) {
  // A configuration is a few kilobytes; the cap keeps a wrong path (a dataset) harmless, and
  // read_regular_file refuses a FIFO or a device (/dev/zero) before reading a byte.
  try {
    return read_regular_file(file, kMaxConfigBytes);
  } catch (const Error& e) {
    std::string why = e.what();
    const std::string name = file.string() + ": ";
    if (why.rfind(name, 0) == 0) why = why.substr(name.size());
    throw ConfigError(ErrorKind::config,
                      {Problem{Where{file.string()}, "",
                               "cannot read the configuration file: " + why, e.hint()}});
  }
}

RunConfig load_config(const std::filesystem::path& file,
                      const std::vector<std::string>& overrides) {
  parse_overrides(overrides);  // a usage error comes first, whatever the file holds
  return parse_config(read_config_text(file), file.string(), overrides);
}

std::vector<KeyDoc> key_docs() {
  std::vector<KeyDoc> docs;
  run_schema().document("", docs);
  return docs;
}

std::string to_yaml(const RunConfig& config, YamlStyle style,
                    const std::map<std::string, Where>* origins) {
  std::vector<Leaf> leaves;
  run_schema().emit(config, "", leaves);
  return leaves_to_yaml(leaves, style == YamlStyle::annotated, origins);
}

namespace {

void collect_origins(const Value& map, const std::string& prefix,
                     std::map<std::string, Where>& out) {
  for (const Value::Entry& e : map.entries) {  // a duplicate: the last one, as the schema reads
    const std::string path = prefix.empty() ? e.key : prefix + "." + e.key;
    out[path] = e.key_where;
    if (e.value.is_map()) collect_origins(e.value, path, out);
  }
}

}  // namespace

std::map<std::string, Where> key_origins(std::string_view yaml, const std::string& origin,
                                         const std::vector<std::string>& overrides) {
  Problems problems;
  Value doc;
  read_document(yaml, origin, doc, problems);
  apply_overrides(doc, parse_overrides(overrides), problems);
  std::map<std::string, Where> out;
  collect_origins(doc, "", out);
  return out;
}

// A JSON object has no order, and data.eval's first named set is the first written: the JSON
// form holds the sets as a list of one-key objects ([{"valid": {...}}, {"other": {...}}]), which
// from_json reads back as the map (json_eval_sets_to_map).
nlohmann::json to_json(const RunConfig& config) {
  std::vector<Leaf> leaves;
  run_schema().emit(config, "", leaves);
  nlohmann::json j = leaves_to_json(leaves);
  if (!config.data.eval_name.empty()) {
    nlohmann::json& eval = j["data"]["eval"];
    nlohmann::json list = nlohmann::json::array();
    for (const std::string& name : eval_set_names(config)) {
      list.push_back({{name, eval.at(name)}});
    }
    eval = std::move(list);
  }
  return j;
}

namespace {

// to_json's list of named sets back to data.eval's map, in the list's order.
void json_eval_sets_to_map(Value& doc) {
  Value::Entry* data = doc.find("data");
  if (data == nullptr || !data->value.is_map()) return;
  Value::Entry* eval = data->value.find("eval");
  if (eval == nullptr || !eval->value.is_list() || eval->value.items.empty()) return;
  Value map;
  map.kind = Value::Kind::map;
  map.where = eval->value.where;
  for (const Value& item : eval->value.items) {
    if (!item.is_map() || item.entries.size() != 1) return;  // not ours: the schema reports it
  }
  for (Value& item : eval->value.items) map.entries.push_back(std::move(item.entries.front()));
  eval->value = std::move(map);
}

}  // namespace

RunConfig from_json(const nlohmann::json& json, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  const std::vector<Override> parsed = parse_overrides(overrides);
  Problems problems;
  Value doc = value_from_json(json, origin, problems);
  if (!doc.is_map()) {
    problems.add(Where{origin}, "", "expected a JSON object, got " + describe(doc));
    problems.throw_if_any(ErrorKind::input);
  }
  json_eval_sets_to_map(doc);
  apply_overrides(doc, parsed, problems);
  RunConfig config = validate(doc, default_name_for(origin), problems);
  bool all_overrides = true;
  for (const Problem& p : problems.list()) {
    all_overrides = all_overrides && p.where.origin.rfind("--set ", 0) == 0;
  }
  problems.throw_if_any(all_overrides ? ErrorKind::config : ErrorKind::input);
  return config;
}

}  // namespace ampctl::config
