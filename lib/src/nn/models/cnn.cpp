#include "ampctl/nn/models/cnn.h"

#include <algorithm>
#include <sstream>

#include "ampctl/core/checked.h"
#include "ampctl/nn/memory_estimate.h"
#include "ampctl/nn/models.h"

namespace ampctl::nn {
namespace {

[[noreturn]] void config_error(const std::string& key, const std::string& problem) {
  throw Error{ErrorKind::config, key + ": " + problem};
}

// The output shape a module gives, for the next one's construction.
ImageShape shape_after(const Module& m, const ImageShape& in) {
  if (const auto* conv = dynamic_cast<const Conv2d*>(&m)) return conv->out_shape();
  if (const auto* pool = dynamic_cast<const Pool2d*>(&m)) return pool->out_shape();
  return in;
}

void summarise(std::ostringstream& os, const Sequential& seq, const char* name,
               const FlatLayout& layout) {
  for (size_t i = 0; i < seq.size(); ++i) {
    const Module& m = seq.at(i);
    os << name << '.' << i << "  " << m.describe();
    int64_t count = 0;
    const char* sep = "  ";
    for (size_t entry : m.param_entries()) {
      const FlatLayout::Entry& e = layout.entries()[entry];
      os << sep << e.name.substr(e.name.rfind('.') + 1) << ' ' << shape_str(e.shape);
      sep = ", ";
      count += static_cast<int64_t>(e.numel);
    }
    os << "  params " << count << '\n';
  }
}

}  // namespace

Cnn::Cnn(Backend& backend, const ModelOptions& options)
    : Model(backend, options, ModelType::cnn),
      m_precision(options.precision),
      m_image{options.cnn.channels, options.cnn.height, options.cnn.width},
      m_rng{options.seed, 0},
      m_loss(options.loss, options.out_features) {
  const CnnOptions& o = options.cnn;
  if (m_image.c < 1 || m_image.h < 1 || m_image.w < 1 || m_image.numel() != m_in) {
    config_error("model.type",
                 "cnn needs image data [N, C, H, W] (data.train.source idx or "
                 "fashion_mnist); the data has rows of " +
                     std::to_string(m_in) + " features");
  }
  if (o.conv.empty()) config_error("model.conv", "at least one [channels, kernel] block is needed");
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    config_error("model.dropout", "must be in [0, 1), got " + std::to_string(o.dropout));
  }
  m_features = std::make_unique<Sequential>();
  ImageShape shape = m_image;
  for (size_t i = 0; i < o.conv.size(); ++i) {
    const int64_t channels = o.conv[i][0], kernel = o.conv[i][1];
    const std::string key = "model.conv[" + std::to_string(i) + "]";
    if (channels < 1 || kernel < 1) config_error(key, "channels and kernel must be >= 1");
    if (kernel > shape.h + 2 * (kernel / 2) || kernel > shape.w + 2 * (kernel / 2)) {
      config_error(key, "a " + std::to_string(kernel) + "x" + std::to_string(kernel) +
                            " kernel does not fit the " + std::to_string(shape.h) + "x" +
                            std::to_string(shape.w) + " image it gets");
    }
    auto conv = std::make_unique<Conv2d>(shape, channels, kernel, 1, kernel / 2, !o.batch_norm);
    shape = conv->out_shape();
    m_features->append(std::move(conv));
    if (o.batch_norm) m_features->append(std::make_unique<BatchNorm2d>(shape));
    m_features->append(std::make_unique<Activation>(o.activation, shape.numel()));
    if (o.pool > 1) {
      if (shape.h < o.pool || shape.w < o.pool) {
        config_error("model.pool", "a " + std::to_string(o.pool) + "x" + std::to_string(o.pool) +
                                       " pool does not fit the " + std::to_string(shape.h) + "x" +
                                       std::to_string(shape.w) + " output of " + key);
      }
      auto pool = std::make_unique<Pool2d>(Pool2d::Kind::max, shape, o.pool, o.pool);
      shape = shape_after(*pool, shape);
      m_features->append(std::move(pool));
    }
  }
  m_classifier = std::make_unique<Sequential>();
  m_classifier->append(std::make_unique<Flatten>(shape));
  int64_t width = shape.numel();
  for (int64_t h : o.hidden) {
    if (h < 1) config_error("model.hidden", "widths must be >= 1");
    m_classifier->append(std::make_unique<Linear>(width, h));
    m_classifier->append(std::make_unique<Activation>(o.activation, h));
    if (o.dropout > 0.0) {
      m_classifier->append(std::make_unique<Dropout>(static_cast<float>(o.dropout), h, &m_rng));
    }
    width = h;
  }
  m_classifier->append(std::make_unique<Linear>(width, m_out));

  m_features->declare(m_layout, "features");
  m_classifier->declare(m_layout, "classifier");
  allocate_params([&](std::span<float> host) {
    m_features->init(host, m_layout, options.seed);
    m_classifier->init(host, m_layout, options.seed);
  });
  m_features->setup(backend, m_layout, m_arenas, m_max_batch, m_act, /*input_grad=*/false);
  m_classifier->setup(backend, m_layout, m_arenas, m_max_batch, m_act, /*input_grad=*/true);
  m_loss.setup(backend, m_max_batch, m_act, m_arenas.numerics);
  m_input = RowViews(backend.zeros({m_max_batch, m_image.c, m_image.h, m_image.w}, m_act));
}

std::string Cnn::summary() const {
  std::ostringstream os;
  summarise(os, *m_features, "features", m_layout);
  summarise(os, *m_classifier, "classifier", m_layout);
  os << "total params " << num_params() << " (" << m_precision << ": " << dtype_name(m_act)
     << " activations, f32 master weights)\n";
  return os.str();
}

std::vector<std::pair<std::string, Tensor>> Cnn::state_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  m_features->collect_buffers(out);
  m_classifier->collect_buffers(out);
  return out;
}

const Tensor& Cnn::forward(const Tensor& input, int64_t batch, bool training) {
  if (batch < 1 || batch > m_max_batch) {
    throw Error{ErrorKind::invalid_argument, "model forward: batch " + std::to_string(batch) +
                                                 " outside [1, " + std::to_string(m_max_batch) +
                                                 "]"};
  }
  if (!input.defined() || input.dtype() != DType::f32 || input.rank() < 2 || input.dim(0) < batch ||
      static_cast<int64_t>(input.numel()) != input.dim(0) * m_in) {
    throw Error{ErrorKind::invalid_argument,
                "model forward input: expected f32 images [>= " + std::to_string(batch) + ", " +
                    std::to_string(m_image.c) + ", " + std::to_string(m_image.h) + ", " +
                    std::to_string(m_image.w) + "], got " +
                    (input.defined() ? input.describe() : std::string("none"))};
  }
  if (input.device() != m_backend->device()) {
    throw Error{ErrorKind::invalid_argument, "model forward input " + input.describe() +
                                                 " is not on " + m_backend->device().str()};
  }
  m_seeded = false;
  m_forward_batch = 0;
  // autocast casts the f32 batch once, before the first conv (fp32: a copy).
  const Tensor& in = m_input.rows(batch);
  m_backend->cast(m_x_rows.of(input, batch), in);
  const Tensor& features = m_features->forward(in, batch, training);
  m_logits = &m_classifier->forward(features, batch, training);
  m_forward_batch = batch;
  return *m_logits;
}

void Cnn::loss(const Tensor& targets, int64_t batch, const Tensor& loss_out,
               const Tensor& correct_out, const Tensor& grad_scale) {
  check_loss_batch("model", "rows", batch, m_forward_batch);
  m_seeded = false;
  m_seeded = m_loss.forward(*m_logits, targets, batch, loss_out, correct_out, grad_scale);
}

void Cnn::backward(int64_t batch) {
  check_backward_batch("model", "rows", m_seeded, batch, m_forward_batch);
  m_seeded = false;
  const Tensor& dfeatures = m_classifier->backward(m_loss.grad(batch), batch);
  m_features->backward(dfeatures, batch);
}

nlohmann::json Cnn::rng_state() const {
  return dropout_rng_state(m_rng);
}

void Cnn::set_rng_state(const nlohmann::json& state) {
  m_rng = dropout_rng_from_state(state);
}

namespace {

// The memory estimate (memory_estimate.h): the conv blocks (docs/reference.md, "The CNN") on
// single-channel images of in_features pixels (idx / fashion_mnist): per block its weights, and
// per sample about eight buffers of its output size (conv y and dx, BatchNorm y and dx,
// activation y and dx, pool y and dx) plus the im2col workspace of one image; the head counted
// as a dense stack from the input width, which over-counts its first Linear (the pools shrink
// it): a safe side for a refusal. (The head's LayerNorms are counted when model.layer_norm is
// set, as for the MLP.)
ModelMemory estimate_cnn(const ModelOptions& o, const Backend*) {
  constexpr ErrorKind kKind = ErrorKind::config;
  DenseCount count =
      dense_stack_count(o.in_features, o.cnn.hidden, o.out_features, o.mlp.layer_norm);
  int64_t& params = count.parameters;
  int64_t& act = count.activations;
  // The dense head's, before the conv blocks add theirs.
  const int64_t head_act = act, head_params = params;
  int64_t channels = 1, pixels = std::max<int64_t>(o.in_features, 1);
  for (size_t i = 0; i < o.cnn.conv.size(); ++i) {
    const std::string key = "model.conv[" + std::to_string(i) + "]";
    const int64_t c = o.cnn.conv[i][0], k = o.cnn.conv[i][1];
    const int64_t kk = checked_mul(checked_mul(channels, k, key, kKind), k, key, kKind);
    params = checked_add(params, arena_aligned(checked_mul(kk, c, key, kKind), key), key, kKind);
    params =
        checked_add(params, checked_mul(arena_aligned(c, key), int64_t{4}, key, kKind), key, kKind);
    const int64_t out = checked_mul(c, pixels, key, kKind);
    act = checked_add(act, checked_mul(out, int64_t{8}, key, kKind), key, kKind);
    act = checked_add(act, checked_mul(kk, pixels, key, kKind) / o.max_batch, key, kKind);
    channels = c;
    if (o.cnn.pool > 1) pixels = std::max<int64_t>(pixels / (o.cnn.pool * o.cnn.pool), 1);
  }
  ModelMemory m = per_row_memory(count, o.in_features, o.out_features, o.cnn.hidden, o.max_batch);
  // The conv blocks' maps usually outweigh the head: then they are what to make smaller (the
  // channels of model.conv, or the batch when it is the larger factor).
  if (act - head_act > head_act && m.activation_key != "data.batch_size") {
    m.activation_key = "model.conv";
  }
  if (params - head_params > head_params) m.model_key = "model.conv";
  // The parameter names by module position, as the constructor appends the modules: per conv
  // block Conv2d (weight; bias without BatchNorm), BatchNorm2d, the activation, the pool; the
  // head's Flatten, then per hidden width Linear, the activation, Dropout, and the last Linear.
  size_t i = 0;
  const auto add = [&](const std::string& seq, bool bias) {
    const std::string p = seq + "." + std::to_string(i) + ".";
    m.parameter_names.push_back(p + "weight");
    if (bias) m.parameter_names.push_back(p + "bias");
  };
  for (size_t b = 0; b < o.cnn.conv.size(); ++b) {
    add("features", !o.cnn.batch_norm);
    ++i;
    if (o.cnn.batch_norm) add("features", true), ++i;
    ++i;  // the activation
    if (o.cnn.pool > 1) ++i;
  }
  i = 1;  // after the Flatten
  for (size_t h = 0; h < o.cnn.hidden.size(); ++h) {
    add("classifier", true);
    i += o.cnn.dropout > 0.0 ? 3 : 2;
  }
  add("classifier", true);
  return m;
}

}  // namespace

ModelMemory Cnn::estimate(const ModelOptions& options, const Backend* backend) {
  return estimate_cnn(options, backend);
}

}  // namespace ampctl::nn
