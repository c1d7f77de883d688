#include "ampctl/nn/model.h"

#include <cmath>
#include <sstream>
#include <vector>

namespace ampctl::nn {

DType compute_dtype(config::Precision precision) {
  switch (precision) {
    case config::Precision::fp16:
      return DType::f16;
    case config::Precision::bf16:
      return DType::bf16;
    case config::Precision::fp32:
      return DType::f32;
  }
  throw Error{ErrorKind::invalid_argument, "unknown precision"};
}

ActivationKind activation_kind(config::Activation activation) {
  switch (activation) {
    case config::Activation::relu:
      return ActivationKind::relu;
    case config::Activation::gelu:
      return ActivationKind::gelu;
    case config::Activation::tanh:
      return ActivationKind::tanh;
  }
  throw Error{ErrorKind::invalid_argument, "unknown activation"};
}

std::unique_ptr<Sequential> make_mlp(const config::ModelConfig& config, int64_t in_features,
                                     int64_t out_features, DropoutRng* dropout_rng) {
  if (config.type != config::ModelType::mlp) {
    throw Error{ErrorKind::invalid_argument, "model.type: only mlp is supported"};
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    throw Error{ErrorKind::invalid_argument,
                "model.dropout: must be in [0, 1), got " + std::to_string(config.dropout)};
  }
  auto seq = std::make_unique<Sequential>();
  int64_t width = in_features;
  for (int64_t h : config.hidden) {
    seq->append(std::make_unique<Linear>(width, h));
    if (config.layer_norm) seq->append(std::make_unique<LayerNorm>(h));
    seq->append(std::make_unique<Activation>(activation_kind(config.activation), h));
    if (config.dropout > 0.0) {
      seq->append(std::make_unique<Dropout>(static_cast<float>(config.dropout), h, dropout_rng));
    }
    width = h;
  }
  seq->append(std::make_unique<Linear>(width, out_features));
  return seq;
}

namespace {

void check_size(int64_t v, const char* what) {
  if (v < 1) {
    throw Error{ErrorKind::invalid_argument,
                std::string("model: ") + what + " must be >= 1, got " + std::to_string(v)};
  }
}

}  // namespace

Model::Model(Backend& backend, const config::ModelConfig& config, config::Precision precision,
             config::LossType loss, int64_t in_features, int64_t out_features, int64_t max_batch,
             uint64_t seed)
    : m_backend(&backend),
      m_precision(precision),
      m_act(nn::compute_dtype(precision)),
      m_in(in_features),
      m_out(out_features),
      m_max_batch(max_batch),
      m_rng{seed, 0},
      m_loss(loss, out_features) {
  check_size(in_features, "in_features");
  check_size(out_features, "out_features");
  check_size(max_batch, "max_batch");
  m_layers = make_mlp(config, in_features, out_features, &m_rng);
  m_layers->declare(m_layout, "layers");

  const auto total = static_cast<int64_t>(m_layout.total());
  // zeros: the alignment padding between tensors must read as zero (FlatLayout's contract).
  m_arenas.params = backend.zeros({total}, DType::f32);
  m_arenas.grads = backend.zeros({total}, DType::f32);
  if (m_act != DType::f32) m_arenas.lowp = backend.zeros({total}, m_act);

  // Initial values are drawn on the host, so every backend starts from the same bits.
  std::vector<float> host(static_cast<size_t>(total), 0.0f);
  m_layers->init(host, m_layout, seed);
  backend.upload(m_arenas.params, host.data(), host.size() * sizeof(float));
  sync_lowp();

  m_layers->setup(backend, m_layout, m_arenas, max_batch, m_act, /*input_grad=*/false);
  m_loss.setup(backend, max_batch, m_act);
  m_input = RowViews(backend.zeros({max_batch, in_features}, m_act));
}

std::vector<optim::ParamGroup> Model::param_groups(float lr) const {
  optim::ParamGroup g;
  g.params = m_arenas.params;
  g.grads = m_arenas.grads;
  g.lowp_params = m_arenas.lowp;
  g.lr = lr;
  return {g};
}

std::vector<std::pair<std::string, Tensor>> Model::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::vector<Tensor> views = m_layout.views(m_arenas.params);
  out.reserve(views.size());
  for (size_t i = 0; i < views.size(); ++i) out.emplace_back(m_layout.entries()[i].name, views[i]);
  return out;
}

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const auto& e : m_layout.entries()) n += static_cast<int64_t>(e.numel);
  return n;
}

std::string Model::summary() const {
  std::ostringstream os;
  for (size_t i = 0; i < m_layers->size(); ++i) {
    const Module& m = m_layers->at(i);
    os << "layers." << i << "  " << m.describe();
    int64_t count = 0;
    const char* sep = "  ";
    for (size_t entry : m.param_entries()) {
      const FlatLayout::Entry& e = m_layout.entries()[entry];
      os << sep << e.name.substr(e.name.rfind('.') + 1) << ' ' << shape_str(e.shape);
      sep = ", ";
      count += static_cast<int64_t>(e.numel);
    }
    os << "  params " << count << '\n';
  }
  os << "total params " << num_params() << " (" << config::to_string(m_precision) << ": "
     << dtype_name(m_act) << " activations, f32 master weights)\n";
  return os.str();
}

void Model::sync_lowp() {
  if (m_arenas.lowp.defined()) m_backend->cast(m_arenas.params, m_arenas.lowp);
}

void Model::zero_grad() {
  m_backend->fill(m_arenas.grads, 0.0);
}

const Tensor& Model::forward(const Tensor& x, int64_t batch, bool training) {
  if (batch < 1 || batch > m_max_batch) {
    throw Error{ErrorKind::invalid_argument, "model forward: batch " + std::to_string(batch) +
                                                 " outside [1, " + std::to_string(m_max_batch) +
                                                 "]"};
  }
  check_matrix(x, batch, m_in, DType::f32, /*exact=*/false, "model forward input");
  if (x.device() != m_backend->device()) {
    throw Error{ErrorKind::invalid_argument,
                "model forward input " + x.describe() + " is not on " + m_backend->device().str()};
  }
  m_seeded = false;
  m_forward_batch = 0;  // stays 0 if an op throws
  // autocast casts the f32 batch once, before the first matrix product (fp32: a copy, so that
  // backward never depends on the caller's buffer).
  const Tensor& input = m_input.rows(batch);
  m_backend->cast(m_x_rows.of(x, batch), input);
  m_logits = &m_layers->forward(input, batch, training);
  m_forward_batch = batch;
  return *m_logits;
}

void Model::loss(const Tensor& targets, int64_t batch, const Tensor& loss_out,
                 const Tensor& correct_out, const Tensor& grad_scale) {
  if (m_forward_batch == 0 || batch != m_forward_batch) {
    throw Error{ErrorKind::state, "model loss: batch " + std::to_string(batch) +
                                      " does not match the last forward (" +
                                      std::to_string(m_forward_batch) + " rows)"};
  }
  m_seeded = false;
  m_seeded = m_loss.forward(*m_logits, targets, batch, loss_out, correct_out, grad_scale);
}

void Model::backward(int64_t batch) {
  if (!m_seeded || batch != m_forward_batch) {
    throw Error{ErrorKind::state,
                "model backward: needs loss() with a grad_scale after a forward of the same "
                "batch (" +
                    std::to_string(batch) + " rows asked, last forward " +
                    std::to_string(m_forward_batch) + ")"};
  }
  // One backward per seeded loss, as autograd frees its graph: a second call would add the
  // same gradients twice.
  m_seeded = false;
  m_layers->backward(m_loss.grad(batch), batch);
}

nlohmann::json Model::rng_state() const {
  return {{"seed", m_rng.seed}, {"dropout_offset", m_rng.calls}};
}

void Model::set_rng_state(const nlohmann::json& state) {
  auto read = [&](const char* key) -> uint64_t {
    if (!state.is_object() || !state.contains(key) || !state.at(key).is_number_unsigned()) {
      throw Error{ErrorKind::input, std::string("model rng state: missing or mistyped key '") +
                                        key + "' (expected a non-negative integer)"};
    }
    return state.at(key).get<uint64_t>();
  };
  const uint64_t seed = read("seed");
  const uint64_t calls = read("dropout_offset");
  m_rng.seed = seed;
  m_rng.calls = calls;
}

}  // namespace ampctl::nn
