#include "ampctl/train/memory_plan.h"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/checked.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/data/idx.h"

namespace ampctl::train {

namespace {

constexpr ErrorKind kKind = ErrorKind::config;
// Each tensor of the flat arenas starts on a 16-element boundary (FlatLayout::kAlignElements).
constexpr int64_t kAlign = 16;
// Per activation element of one batch: the fp32 output and its gradient, the low-precision copy
// the next matmul reads, and the pre-activation kept for the backward pass (4 + 4 + 2 + 4, with
// room for a dropout mask or layer-norm statistics).
constexpr int64_t kActivationBytes = 16;

uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}

// The elements of one parameter tensor, aligned as the arena lays it out.
int64_t aligned(int64_t n, const std::string& key) {
  return checked_add(n, kAlign - 1, key, kKind) / kAlign * kAlign;
}

int64_t data_bytes(int64_t samples, int64_t features, int64_t outputs, bool classification,
                   const std::string& key) {
  // x as fp32, labels as int32 (classification) or targets as fp32.
  const int64_t per_row = checked_add(
      checked_mul(features, int64_t{4}, key, kKind),
      classification ? int64_t{4} : checked_mul(outputs, int64_t{4}, key, kKind), key, kKind);
  return checked_mul(samples, per_row, key, kKind);
}

// The GPT (nn/models/gpt.h): its parameter count, and the bytes of its activation buffers,
// which the model allocates for data.batch_size sequences of model.block_size positions.
struct GptEstimate {
  int64_t params = 0;
  int64_t activations = 0;
};

GptEstimate estimate_gpt(const config::RunConfig& config, int64_t vocab, const Backend* backend) {
  const config::ModelConfig& m = config.model;
  const std::string ckey = "model.n_embd";
  const int64_t C = m.n_embd, L = m.n_layer, T = m.block_size, H = m.n_head;
  const int64_t V = std::max<int64_t>(vocab, 1);
  const int64_t bias = m.bias ? 1 : 0;
  auto mul = [&](int64_t a, int64_t b, const std::string& key) {
    return checked_mul(a, b, key, kKind);
  };
  auto add = [&](int64_t a, int64_t b, const std::string& key) {
    return checked_add(a, b, key, kKind);
  };
  GptEstimate e;
  // One block: c_attn [3C, C], attn.c_proj [C, C], mlp.c_fc [4C, C], mlp.c_proj [C, 4C], two
  // LayerNorms, and the biases when model.bias; every tensor aligned as the arena lays it out.
  int64_t block = 0;
  for (int64_t k : {int64_t{3}, int64_t{1}, int64_t{4}, int64_t{4}}) {
    block = add(block, aligned(mul(mul(k, C, ckey), C, ckey), ckey), ckey);
  }
  block = add(block, mul(aligned(C, ckey), 2 + 2 * bias, ckey), ckey);
  if (m.bias) {
    for (int64_t k : {int64_t{3}, int64_t{1}, int64_t{4}, int64_t{1}}) {
      block = add(block, aligned(mul(k, C, ckey), ckey), ckey);
    }
  }
  e.params = mul(block, L, "model.n_layer");
  e.params = add(e.params, aligned(mul(V, C, ckey), ckey), ckey);                         // wte
  e.params = add(e.params, aligned(mul(T, C, "model.block_size"), ckey), ckey);           // wpe
  e.params = add(e.params, mul(aligned(C, ckey), 1 + bias, ckey), ckey);                  // ln_f
  if (!m.tie_embeddings) e.params = add(e.params, aligned(mul(V, C, ckey), ckey), ckey);  // head
  // Activations: the buffers Gpt::allocate_buffers makes for B = data.batch_size sequences of
  // T = model.block_size positions, element for element (Gpt::buffer_bytes; the GPT memory
  // test compares the two). lo is the compute dtype's size; R = B T rows.
  const int64_t lo = config.precision == config::Precision::fp32 ? 4 : 2;
  const std::string tkey = "model.block_size", bkey = "data.batch_size";
  const int64_t B = config.data.batch_size;
  const int64_t R = mul(B, T, bkey);
  const int64_t RC = mul(R, C, ckey);
  const int64_t att = mul(mul(mul(B, H, bkey), T, tkey), T, tkey);  // B H T T
  // Attention without dropout is the backend's op pair, whose buffers the backend sizes (fused
  // on CUDA for f16/bf16: no T x T); with dropout the GPT composes the materialised ops.
  const bool attention_op = !(m.dropout > 0.0);
  AttentionSizes as;
  if (attention_op) {
    const DType act = lo == 4                                       ? DType::f32
                      : config.precision == config::Precision::bf16 ? DType::bf16
                                                                    : DType::f16;
    if (backend != nullptr) {
      as = backend->attention_workspace(mul(B, H, bkey), T, C / std::max<int64_t>(H, 1), act);
    } else {
      // Backend's default (the CPU's): probs f32, att in the compute dtype, two T x T scratches.
      as.saved_f32 = att;
      as.saved_lowp = act == DType::f32 ? 0 : att;
      as.scratch_lowp = mul(att, 2, tkey);
    }
  }
  // Per block: x_in, x_mid (f32); ln1, q, k, v, yrows, ln2 (lo); fc, gelu (4C, lo); mean and
  // rstd of both norms (f32, R each); then attention's: y_heads (lo) and the backend's saved
  // buffers, or probs (f32) and att (lo).
  int64_t f32_elems = add(mul(2, RC, ckey), mul(4, R, bkey), ckey);
  int64_t lo_elems = mul(14, RC, ckey);
  if (attention_op) {
    f32_elems = add(f32_elems, as.saved_f32, tkey);
    lo_elems = add(add(lo_elems, RC, ckey), as.saved_lowp, tkey);
  } else {
    f32_elems = add(f32_elems, att, tkey);
    lo_elems = add(lo_elems, att, tkey);
  }
  f32_elems = mul(f32_elems, L, "model.n_layer");
  lo_elems = mul(lo_elems, L, "model.n_layer");
  // Shared: the embedding/last stream, g and t (f32); ln_f's statistics and the token ids (4
  // bytes, R each); lnf, branch, branch_drop, yheads, dc, dc2, dyh, dq, dk, dv (lo), d4a, d4b
  // (4C), dqkv (3C); the logits [R, V] (dlogits are written over them); attention's shared
  // scratch or the materialised backward's datt, dscores (lo) and dprobs (f32); LayerNorm's
  // zero bias and dbeta sink (f32 C); the lowp weight-gradient workspaces (not in fp32) and the
  // bias-gradient ones.
  f32_elems = add(f32_elems, add(mul(3, RC, ckey), mul(3, R, bkey), ckey), ckey);
  lo_elems = add(lo_elems, mul(21, RC, ckey), ckey);
  lo_elems = add(lo_elems, mul(R, V, "data.train (vocabulary)"), ckey);
  if (attention_op) {
    f32_elems = add(f32_elems, as.scratch_f32, tkey);
    lo_elems = add(lo_elems, as.scratch_lowp, tkey);
  } else {
    f32_elems = add(f32_elems, att, tkey);
    lo_elems = add(lo_elems, mul(2, att, tkey), tkey);
  }
  f32_elems = add(f32_elems, mul(2, C, ckey), ckey);
  if (lo != 4) {
    lo_elems = add(lo_elems, mul(mul(12, C, ckey), C, ckey), ckey);
    lo_elems = add(lo_elems, mul(V, C, ckey), ckey);
  }
  lo_elems = add(lo_elems, mul(8, C, ckey), ckey);
  e.activations = add(mul(f32_elems, 4, ckey), mul(lo_elems, lo, ckey), ckey);
  return e;
}

}  // namespace

std::string MemoryPlan::str() const {
  std::string s =
      "parameters " + format_bytes(parameters) + ", gradients " + format_bytes(gradients);
  if (lowp_copy) s += ", fp16/bf16 copy " + format_bytes(lowp_copy);
  if (optimizer) s += ", optimizer state " + format_bytes(optimizer);
  s += ", activations " + format_bytes(activations) + ", data " + format_bytes(data);
  return s;
}

MemoryPlan plan_memory(const config::RunConfig& config, const DataShape& shape,
                       const Backend* backend) {
  std::vector<int64_t> widths{std::max<int64_t>(shape.features, 1)};
  widths.insert(widths.end(), config.model.hidden.begin(), config.model.hidden.end());
  widths.push_back(std::max<int64_t>(shape.outputs, 1));
  const size_t hidden = config.model.hidden.size();
  const auto key_of = [&](size_t layer) {
    // Layer i maps widths[i] -> widths[i + 1]: name the hidden width that makes it large (the
    // last layer's input is the last hidden width).
    if (hidden == 0) return std::string("model.hidden");
    return "model.hidden[" + std::to_string(std::min(layer, hidden - 1)) + "]";
  };
  int64_t params = 0, act = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const std::string key = key_of(i);
    const int64_t weights = checked_mul(widths[i], widths[i + 1], key + " (weights)", kKind);
    params = checked_add(params, aligned(weights, key), key + " (parameters)", kKind);
    params = checked_add(params, aligned(widths[i + 1], key), key + " (parameters)", kKind);
    if (config.model.layer_norm && i + 2 < widths.size()) {
      params = checked_add(params, checked_mul(aligned(widths[i + 1], key), int64_t{2}, key, kKind),
                           key + " (parameters)", kKind);
    }
    act = checked_add(act, widths[i + 1], key, kKind);
  }
  if (config.model.type == config::ModelType::cnn) {
    // The conv blocks (docs/reference.md, "The CNN") on single-channel images of `features`
    // pixels (idx / fashion_mnist): per block its weights, and per sample about eight buffers of
    // its output size (conv y and dx, BatchNorm y and dx, activation y and dx, pool y and dx)
    // plus the im2col workspace of one image. The head above was counted from the input width,
    // which over-counts its first Linear (the pools shrink it): a safe side for a refusal.
    int64_t channels = 1, pixels = std::max<int64_t>(shape.features, 1);
    for (size_t i = 0; i < config.model.conv.size(); ++i) {
      const std::string key = "model.conv[" + std::to_string(i) + "]";
      const int64_t c = config.model.conv[i][0], k = config.model.conv[i][1];
      const int64_t kk = checked_mul(checked_mul(channels, k, key, kKind), k, key, kKind);
      params = checked_add(params, aligned(checked_mul(kk, c, key, kKind), key), key, kKind);
      params =
          checked_add(params, checked_mul(aligned(c, key), int64_t{4}, key, kKind), key, kKind);
      const int64_t out = checked_mul(c, pixels, key, kKind);
      act = checked_add(act, checked_mul(out, int64_t{8}, key, kKind), key, kKind);
      act = checked_add(act, checked_mul(kk, pixels, key, kKind) / config.data.batch_size, key,
                        kKind);
      channels = c;
      if (config.model.pool > 1)
        pixels = std::max<int64_t>(pixels / (config.model.pool * config.model.pool), 1);
    }
  }
  MemoryPlan plan;
  std::string pkey = key_of(widths.size() - 2) + " (bytes)";
  int64_t gpt_activations = -1;
  if (config.model.type == config::ModelType::gpt) {
    const GptEstimate g = estimate_gpt(config, shape.outputs, backend);
    params = g.params;
    gpt_activations = g.activations;
    pkey = "model.n_embd (bytes)";
  }
  plan.parameter_count = params;
  const int64_t fp32 = checked_mul(params, int64_t{4}, pkey, kKind);
  plan.parameters = u(fp32);
  plan.gradients = u(fp32);
  if (config.precision != config::Precision::fp32) {
    plan.lowp_copy = u(checked_mul(params, int64_t{2}, pkey, kKind));
  }
  switch (config.optimizer.type) {
    case config::OptimizerType::adam:
    case config::OptimizerType::adamw:
      plan.optimizer = u(checked_mul(fp32, int64_t{2}, pkey, kKind));
      break;
    case config::OptimizerType::sgd:
      plan.optimizer = config.optimizer.momentum != 0.0 ? u(fp32) : 0;
      break;
  }
  const std::string bkey = "data.batch_size";
  act = checked_add(act, widths.front(), bkey, kKind);
  plan.activations = gpt_activations >= 0
                         ? u(gpt_activations)
                         : u(checked_mul(checked_mul(act, config.data.batch_size, bkey, kKind),
                                         kActivationBytes, bkey, kKind));
  const bool classification = config::task_of(config.data.train) == config::Task::classification;
  plan.data = u(checked_add(
      data_bytes(shape.train_samples, shape.features, shape.outputs, classification, "data.train"),
      data_bytes(shape.eval_samples, shape.features, shape.outputs, classification, "data.eval"),
      "data", kKind));
  uint64_t total = 0;
  for (uint64_t part : {plan.parameters, plan.gradients, plan.lowp_copy, plan.optimizer,
                        plan.activations, plan.data}) {
    if (__builtin_add_overflow(total, part, &total)) {
      throw Error{kKind, pkey + ": the run's memory (" + plan.str() + ") overflows a 64-bit size"};
    }
  }
  plan.total = total;
  return plan;
}

namespace {

// The images file's header: {count, rows * cols}, or nullopt when it cannot be read.
std::optional<std::pair<int64_t, int64_t>> idx_shape(const std::filesystem::path& images) {
  std::error_code ec;
  if (!std::filesystem::exists(images, ec)) return std::nullopt;
  if (!non_regular_kind(images).empty()) return std::nullopt;  // the loader reports it
  try {
    const data::IdxHeader h = data::read_idx_header(images, data::kIdxImagesMagic);
    return std::make_pair(static_cast<int64_t>(h.dims[0]),
                          static_cast<int64_t>(h.dims[1] * h.dims[2]));
  } catch (const Error&) {
    return std::nullopt;  // a damaged file is the loader's to report, with its full message
  }
}

// {samples, features, outputs, exact} of one source.
struct SourceShape {
  int64_t samples = 0, features = 1, outputs = 1;
  bool exact = false;
};

SourceShape source_shape(const config::DataSource& s) {
  SourceShape out;
  switch (s.source) {
    case config::SourceKind::synthetic:
      out = {s.samples, s.features, s.task == config::Task::classification ? s.classes : 1, true};
      break;
    case config::SourceKind::idx:
    case config::SourceKind::fashion_mnist: {
      std::filesystem::path images = s.images;
      if (s.source == config::SourceKind::fashion_mnist) {
        const std::string stem =
            std::string(s.split == config::DatasetSplit::train ? "train" : "t10k") +
            "-images-idx3-ubyte";
        std::error_code ec;
        images = std::filesystem::path(s.dir) / (stem + ".gz");
        if (!std::filesystem::exists(images, ec)) images = std::filesystem::path(s.dir) / stem;
      }
      out.outputs = 10;
      if (const auto shape = idx_shape(images)) {
        out.samples = shape->first;
        out.features = shape->second;
        out.exact = true;
      }
      break;
    }
    case config::SourceKind::tokens:
      // The vocabulary is the config's (a GPT's logits are [rows, vocab_size]).
      out.outputs = std::max<int64_t>(s.vocab_size, 1);
      break;
    default:
      break;  // csv, text: the width is only known once the file is read
  }
  return out;
}

}  // namespace

DataShape data_shape_from_config(const config::RunConfig& config) {
  const SourceShape train = source_shape(config.data.train);
  DataShape shape{train.features, train.outputs, train.samples, 0, train.exact};
  if (config.data.eval && config.data.eval->source != config::SourceKind::split) {
    const SourceShape eval = source_shape(*config.data.eval);
    shape.eval_samples = eval.samples;
    shape.exact = shape.exact && eval.exact;
  }
  return shape;
}

void check_memory(const config::RunConfig& config, const DataShape& shape,
                  std::optional<uint64_t> available, const std::string& where,
                  const Backend* backend) {
  const MemoryPlan plan = plan_memory(config, shape, backend);
  if (!available || plan.total <= *available) return;
  const uint64_t model = plan.parameters + plan.gradients + plan.lowp_copy + plan.optimizer;
  // Activations grow with the batch times the widths: blame whichever factor is the larger.
  int64_t widths = std::max<int64_t>(shape.features, 1) + std::max<int64_t>(shape.outputs, 1);
  for (const int64_t h : config.model.hidden) widths += h;
  const char* activation_key = widths > config.data.batch_size ? "model.hidden" : "data.batch_size";
  const char* model_key = "model.hidden";
  if (config.model.type == config::ModelType::gpt) {
    // A GPT's activations grow with batch x block_size x (widths + heads x block_size).
    model_key = "model.n_embd";
    activation_key =
        config.data.batch_size > config.model.block_size ? "data.batch_size" : "model.block_size";
  }
  const char* key = model >= plan.activations && model >= plan.data ? model_key
                    : plan.activations >= plan.data                 ? activation_key
                                                                    : "data.train";
  throw Error{kKind,
              std::string(key) + ": the run needs about " + format_bytes(plan.total) + " of " +
                  where + " (" + plan.str() + "; " + std::to_string(plan.parameter_count) +
                  " parameters), and " + format_bytes(*available) + " is available",
              std::string("make ") + key + " smaller" +
                  (shape.exact ? "" : " (data files not read yet count as empty here)")};
}

void check_run_memory(const config::RunConfig& config, int64_t features, int64_t outputs,
                      int64_t train_samples, int64_t eval_samples, const Device& device,
                      const Backend* backend) {
  const DataShape shape{features, outputs, train_samples, eval_samples, true};
  if (device.type == DeviceType::cpu) {
    check_memory(config, shape, host_memory_available(), "host memory", backend);
  } else {
    // Everything the plan counts lives on the GPU for a CUDA run (the data sets are resident
    // there too); its free memory is read after the backend made its context and workspaces.
    check_memory(config, shape, cuda_free_memory(device.index), "memory on " + device.str(),
                 backend);
  }
}

void check_config_memory(const config::RunConfig& config) {
  const DataShape shape = data_shape_from_config(config);
  const bool host = config.device == "cpu" || (config.device == "auto" && cuda_device_count() == 0);
  if (host) {
    check_memory(config, shape, host_memory_available());
  } else {
    plan_memory(config, shape);  // the GPU may be another machine's: only the sizes are checked
  }
}

}  // namespace ampctl::train
