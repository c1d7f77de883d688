// RunConfig: the configuration of docs/reference.md, "Configuration" as typed values, and the ways
// in and out of it.
//
// Every key is declared once, in the field table of run_config.cpp (key path, type, default,
// range or choices, help). Parsing, validation, --set overrides, the resolved YAML dump, the JSON
// form kept in checkpoints and `ampctl validate` all come from that table, so they cannot
// disagree.
//
// Invariants of a RunConfig returned by load_config/parse_config/from_json: every value is in
// its range; every default is filled in, including the derived ones (`name` from the config
// file's stem, `loss` from the training data's task, `scheduler.max_lr` from `optimizer.lr`);
// keys that only apply to another choice (SGD's momentum under adamw, csv's path under a
// synthetic source) hold their static defaults and are left out of the dump; a document may
// still write them, at their default only (so the listing in docs/reference.md is valid, and no
// setting is silently ignored). A default-constructed RunConfig is zero-filled and NOT a valid
// configuration.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/config/problems.h"
#include "ampctl/core/tensor.h"
#include "ampctl/data/kinds.h"
#include "ampctl/dist/comm_backend.h"
#include "ampctl/math/scale_rules.h"
#include "ampctl/nn/loss_kind.h"
#include "ampctl/nn/model_type.h"
#include "ampctl/optim/schedule_kinds.h"

namespace ampctl::config {

enum class Precision { fp16, bf16, fp32 };
using ModelType = nn::ModelType;       // its names: nn/model_type.h
enum class DecayOn { all, matrices };  // optimizer.decay_on
enum class Activation { relu, gelu, tanh };
// The choices of a lower module are its own enums, named in its small header (plain data):
using LossType = nn::LossKind;          // nn/loss_kind.h
using SourceKind = data::SourceKind;    // data/kinds.h, as the next four
using VocabKind = data::VocabKind;      // YAML: char | byte
using TokenFormat = data::TokenFormat;  // YAML: auto | raw | llmc | u32
using Task = data::Task;
using DatasetSplit = data::DatasetSplit;
enum class OptimizerType { sgd, adam, adamw };
using SchedulerType = optim::ScheduleType;  // optim/schedule_kinds.h
using AnnealStrategy = optim::Anneal;
enum class Toggle { automatic, on, off };  // YAML: auto | true | false
enum class InjectValue { inf, nan };
using DistBackend = dist::CommBackend;       // dist/comm_backend.h
enum class OnOverflow { skip, retry };       // scaler.on_overflow
enum class OnMinScale { keep_going, stop };  // scaler.on_min_scale; YAML: continue | stop
// scaler.policy is an amp::ScalePolicy: its names and what each rule reads are amp::kScaleRules'
// (math/scale_rules.h).
// checkpoint.keep_best, training.early_stop.metric: an evaluation line's value to watch.
enum class EvalMetric { none, eval_loss, eval_accuracy };
// The same with the evaluation set it is read from: "eval_loss" (the first set's), or
// "eval.NAME.loss" / "eval.NAME.accuracy" (data.eval's set NAME; the first set's too).
struct EvalMetricRef {
  EvalMetric kind{};
  std::string set;  // "": the first evaluation set
  bool operator==(const EvalMetricRef&) const = default;
};

// The YAML spelling of each choice ("fp16", "fashion_mnist", "auto", ...).
const char* to_string(Precision v);
const char* to_string(ModelType v);
const char* to_string(DecayOn v);
const char* to_string(Activation v);
const char* to_string(LossType v);
const char* to_string(SourceKind v);
const char* to_string(VocabKind v);
const char* to_string(TokenFormat v);
using data::to_string;  // Task (data/kinds.h)
const char* to_string(DatasetSplit v);
const char* to_string(OptimizerType v);
const char* to_string(SchedulerType v);
const char* to_string(AnnealStrategy v);
const char* to_string(Toggle v);
const char* to_string(InjectValue v);
const char* to_string(DistBackend v);
const char* to_string(OnOverflow v);
const char* to_string(OnMinScale v);
const char* to_string(EvalMetric v);
// "none", "eval_loss", "eval.valid2.accuracy": as the configuration writes it.
std::string to_string(const EvalMetricRef& v);

// A csv label column: a header name, or an index (negative counts from the end; -1 = last).
struct LabelColumn {
  std::string name;   // non-empty: by name (needs header: true)
  int64_t index = 0;  // used when name is empty
  bool operator==(const LabelColumn&) const = default;
};

// One data source. `source` says which members apply; the others hold their defaults.
struct DataSource {
  SourceKind source{};
  Task task{};                 // synthetic, csv (idx and fashion_mnist are classification)
  int64_t samples = 0;         // synthetic
  int64_t features = 0;        // synthetic
  int64_t classes = 0;         // synthetic classification
  std::string images, labels;  // idx: MNIST-format files (.gz accepted)
  DatasetSplit split{};        // fashion_mnist
  std::string dir;             // fashion_mnist
  std::string path;            // csv, text, tokens
  LabelColumn label_column;    // csv
  bool header = false;         // csv: the first row names the columns
  // split (data.eval only): hold out this part of data.train; text, tokens (data.train only):
  // the last part of the file held out when data.eval is null.
  double split_fraction = 0.0;
  VocabKind vocab{};           // text
  std::string tokenizer;       // text: a BPE tokenizer instead of `vocab` (empty: none)
  int64_t vocab_size = 0;      // tokens
  TokenFormat token_format{};  // tokens (YAML key `format`)
  bool operator==(const DataSource&) const = default;
};

// idx and fashion_mnist hold classes; synthetic and csv say.
Task task_of(const DataSource& source);
// text and tokens: language-model data (token windows, not feature rows).
bool is_language_model(const DataSource& source);

struct ModelConfig {
  ModelType type{};
  std::vector<int64_t> hidden;  // mlp, cnn (its head)
  Activation activation{};      // mlp, cnn
  double dropout = 0.0;         // every type
  bool layer_norm = false;      // mlp
  int64_t n_layer = 0;          // gpt (n_head divides n_embd)
  int64_t n_head = 0;           // gpt
  int64_t n_embd = 0;           // gpt
  int64_t block_size = 0;       // gpt
  bool bias = false;            // gpt
  bool tie_embeddings = false;  // gpt
  // cnn (docs/reference.md, "The CNN"): conv blocks [channels, kernel], max-pool size after
  // each (1 = none), BatchNorm2d after each conv.
  std::vector<std::array<int64_t, 2>> conv;
  int64_t pool = 2;
  bool batch_norm = false;
  bool operator==(const ModelConfig&) const = default;
};

// A further evaluation set of data.eval's map form (name -> source).
struct NamedEvalSource {
  std::string name;   // [A-Za-z0-9_-]+
  DataSource source;  // never SourceKind::split (that form may only be the first set)
  bool operator==(const NamedEvalSource&) const = default;
};

struct DataConfig {
  DataSource train;
  // The first (or only) evaluation set: none, a source, or SourceKind::split.
  std::optional<DataSource> eval;
  // data.eval as a map of name -> source (docs/reference.md, "Evaluation sets"): the first
  // set's name (its source is `eval`) and the further sets in the file's order. The single
  // form: eval_name "" (the set is called "eval") and no further sets.
  std::string eval_name;
  std::vector<NamedEvalSource> eval_sets;
  int64_t batch_size = 0;
  bool shuffle = false;
  bool drop_last = false;
  bool normalize = false;
  bool operator==(const DataConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerType type{};
  double lr = 0.0;
  double weight_decay = 0.0;
  DecayOn decay_on{};
  std::array<double, 2> betas{};  // adam, adamw
  double eps = 0.0;               // adam, adamw
  double momentum = 0.0;          // sgd
  double dampening = 0.0;         // sgd
  bool nesterov = false;          // sgd
  bool operator==(const OptimizerConfig&) const = default;
};

struct SchedulerConfig {
  SchedulerType type{};
  int64_t warmup_steps = 0;          // all but onecycle
  double min_lr = 0.0;               // linear, cosine
  int64_t decay_steps = 0;           // linear, cosine, onecycle: 0 = training.max_steps
  int64_t step_size = 0;             // step
  double gamma = 0.0;                // step
  double max_lr = 0.0;               // onecycle
  double pct_start = 0.0;            // onecycle
  double div_factor = 0.0;           // onecycle
  double final_div_factor = 0.0;     // onecycle
  AnnealStrategy anneal_strategy{};  // onecycle
  bool three_phase = false;          // onecycle
  bool cycle_momentum = false;       // onecycle
  double base_momentum = 0.0;        // onecycle
  double max_momentum = 0.0;         // onecycle
  bool operator==(const SchedulerConfig&) const = default;
};

struct ScalerConfig {
  Toggle enabled{};
  double init_scale = 0.0;
  double growth_factor = 0.0;
  double backoff_factor = 0.0;
  int64_t growth_interval = 0;
  int64_t hysteresis = 0;
  double min_scale = 0.0;
  double max_scale = 0.0;
  OnOverflow on_overflow{};
  int64_t max_retries = 0;  // with on_overflow: retry
  OnMinScale on_min_scale{};
  amp::ScalePolicy policy{};
  bool consecutive_hysteresis = false;  // deepspeed
  double tolerance = 0.0;               // fairseq
  int64_t margin = 0;                   // auto
  int64_t amax_history = 0;             // auto
  bool operator==(const ScalerConfig&) const = default;
};

// training.early_stop: stop when `metric` has not improved by more than min_delta in `patience`
// evaluations in a row (Keras's EarlyStopping; docs/reference.md, "Checkpoints").
struct EarlyStopConfig {
  EvalMetricRef metric{};  // none: never
  int64_t patience = 0;
  double min_delta = 0.0;
  bool operator==(const EarlyStopConfig&) const = default;
};

struct TrainingConfig {
  int64_t max_steps = 0;
  int64_t grad_accum_steps = 0;
  // Examples per optimizer step over all ranks (0: grad_accum_steps decides); the accumulation
  // then follows from it at run time (train/build.h: grad_accum_steps_for).
  int64_t global_batch = 0;
  std::optional<double> grad_clip_norm;
  int64_t eval_every = 0;
  int64_t eval_batches = 0;         // language models: validation batches per evaluation
  int64_t divergence_patience = 0;  // 0 = never stop (see train/trainer.h)
  EarlyStopConfig early_stop;
  bool operator==(const TrainingConfig&) const = default;
};

struct CheckpointConfig {
  int64_t every_steps = 0;
  bool at_eval = false;  // a checkpoint at every training.eval_every step as well
  int64_t keep_last = 0;
  EvalMetricRef keep_best{};  // the checkpoint best by this metric, kept beside keep_last
  bool operator==(const CheckpointConfig&) const = default;
};

// init.*: the weights a run starts from (`ampctl train --init-from`; train/init_from.h).
struct InitConfig {
  std::string from;     // "" = the model's own initialisation
  bool strict = false;  // every tensor matched by name and shape
  bool operator==(const InitConfig&) const = default;
};

struct LoggingConfig {
  int64_t every_steps = 0;
  int64_t metrics_every = 0;
  bool profile = false;
  int64_t numerics_every = 0;  // gradient numerics sample interval; 0 = off
  bool grad_amax = false;      // grad_amax on every train line (docs/reference.md)
  bool tensorboard = false;    // events.out.tfevents.* in the run directory
  bool operator==(const LoggingConfig&) const = default;
};

struct DebugConfig {
  std::vector<int64_t> inject_nonfinite_at;
  InjectValue inject_value{};
  std::string inject_tensor;  // a parameter name; "" = the first element of the gradient arena
  int64_t inject_rank = -1;   // with several ranks: only this rank injects (-1 = every rank)
  bool operator==(const DebugConfig&) const = default;
};

// distributed.*: data-parallel training over several ranks (docs/distributed.md).
struct DistributedConfig {
  DistBackend backend{};
  double bucket_mb = 25;  // gradient all-reduce bucket size
  int64_t zero = 0;       // ZeRO stage: 0 replicated optimizer state, 1 sharded over the ranks
  bool operator==(const DistributedConfig&) const = default;
};

struct RunConfig {
  std::string name;
  int64_t seed = 0;
  std::string device;  // "auto", "cpu", "cuda" or "cuda:N"
  Precision precision{};
  ModelConfig model;
  LossType loss{};
  DataConfig data;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ScalerConfig scaler;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  InitConfig init;
  LoggingConfig logging;
  DistributedConfig distributed;
  DebugConfig debug;
  bool operator==(const RunConfig&) const = default;
};

// scaler.enabled with `auto` resolved: on for fp16, off for bf16 and fp32.
bool scaler_enabled(const RunConfig& config);
// The scaler settings ("scaler.growth_interval: 100") that differ from their defaults while the
// scaler is off: nothing reads them. With scaler.enabled: false they are refused when parsed;
// with auto (bf16, fp32) train warns, since the same file turns the scaler on in fp16.
std::vector<std::string> unused_scaler_keys(const RunConfig& config);
// The steps a linear, cosine or onecycle schedule decays over: scheduler.decay_steps, or
// training.max_steps when it is 0 (nanoGPT's lr_decay_iters; the lr stays at the schedule's end
// after them). Other schedules: training.max_steps.
int64_t schedule_steps(const RunConfig& config);
// Whether the schedule's lr depends on its length (linear, cosine, onecycle): a change of
// training.max_steps re-stretches it unless scheduler.decay_steps fixes the length.
bool schedule_decays(const RunConfig& config);
// Whether the run evaluates: data.eval is set, or a language model holds out part of its text
// (data.train.split_fraction > 0).
bool has_eval_data(const RunConfig& config);
// The evaluation sets' names, the first set's first ("eval" for the single form); empty when
// the run does not evaluate.
std::vector<std::string> eval_set_names(const RunConfig& config);
// The index in eval_set_names of the set `metric` reads (0 for the first set's, or none).
size_t eval_set_index(const RunConfig& config, const EvalMetricRef& metric);
// Whether every step measures grad_amax: logging.grad_amax, or a scaler.policy that reads it
// (auto) with the scaler on.
bool measures_grad_amax(const RunConfig& config);
// The half type the backward rounds to: bf16 for precision bf16, else fp16 (whose range fp32
// runs report against).
DType half_dtype(Precision precision);
// The scale rule's settings of a run (scaler.*, and the range of its half type): what the
// GradScaler, both backends and replay update with. The one conversion of those keys.
amp::ScaleUpdateParams scale_settings(const RunConfig& config);

// Reads, overrides and validates a configuration file. `overrides` are `--set` arguments
// ("KEY=VALUE"), applied in order before validation. Throws Error{usage} for an override
// without '=', ConfigError{config} listing every problem otherwise (a missing or unreadable
// file is one such problem).
RunConfig load_config(const std::filesystem::path& file,
                      const std::vector<std::string>& overrides = {});

// The same from YAML text; `origin` names it in messages and its stem is the default name.
// `base:` files are merged under the text (config/base.h). Relative paths (init.from, data.*'s
// path, images, labels, dir, tokenizer) become absolute (docs/reference.md, "Paths"): each one
// written in a file against that file's folder (`origin`'s, or a base's), those from `overrides`
// against the current directory.
RunConfig parse_config(std::string_view yaml, const std::string& origin,
                       const std::vector<std::string>& overrides = {});

// An override and who said it (config::Override::said): a command line's flag (no position:
// problems name the flag, relative paths are read from the current directory) or a line of the
// configuration file `origin` (a sweep section's value: problems name that line, relative paths
// are read from the file's folder, as the file's own are).
struct SaidOverride {
  std::string text;  // "KEY=VALUE"
  Where said;        // empty origin: --set
};
RunConfig parse_config_said(std::string_view yaml, const std::string& origin,
                            const std::vector<SaidOverride>& overrides);

// One configuration text resolved under many override lists (`ampctl replay`'s grid of up to
// 100,000 settings): resolve(o) is parse_config_said(yaml, origin, o), bit for bit and problem
// for problem, but the text's YAML is read once (the constructor) and each distinct override's
// VALUE once (a memo inside). Not for concurrent use.
class ConfigTemplate {
 public:
  // Throws ConfigError{config} for text that is no usable YAML mapping, as parse_config does.
  ConfigTemplate(std::string_view yaml, const std::string& origin);
  ~ConfigTemplate();
  ConfigTemplate(const ConfigTemplate&) = delete;
  ConfigTemplate& operator=(const ConfigTemplate&) = delete;
  RunConfig resolve(const std::vector<SaidOverride>& overrides) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

enum class YamlStyle {
  plain,     // the resolved configuration (run directories' config.yaml)
  annotated  // each key followed by its help as a comment (ampctl validate)
};

// The resolved configuration as YAML, every applicable key in the order of docs/reference.md's key
// table. parse_config(to_yaml(c), ...) == c. With `origins` (annotated style), each key written
// somewhere says where first: "# [configs/gpt_fortunes.yaml:14] help" (`ampctl validate`).
std::string to_yaml(const RunConfig& config, YamlStyle style = YamlStyle::plain,
                    const std::map<std::string, Where>* origins = nullptr);

// Where each key of the configuration file `origin` (text `yaml`, its bases merged, then
// `overrides`) was written: dotted key path -> its key's Where (a file's line and column, or
// the --set that wrote it). Keys written nowhere (defaults, derived values) are absent. What is
// wrong with the text is parse_config's to report: this reads what it can.
std::map<std::string, Where> key_origins(std::string_view yaml, const std::string& origin,
                                         const std::vector<std::string>& overrides = {});

// The same keys as JSON (for checkpoints). JSON has no infinity or NaN: such floats are written
// as the strings ".inf", "-.inf", ".nan", which from_json reads back.
nlohmann::json to_json(const RunConfig& config);

// Validates a JSON configuration exactly as a YAML one (then `overrides`); throws ConfigError
// whose problems name the keys, of kind input (a bad checkpoint), or config when every problem
// comes from an override.
RunConfig from_json(const nlohmann::json& json, const std::string& origin = "config",
                    const std::vector<std::string>& overrides = {});

}  // namespace ampctl::config
