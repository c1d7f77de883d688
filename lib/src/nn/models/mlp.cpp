#include "ampctl/nn/models/mlp.h"

#include <algorithm>
#include <sstream>

#include "ampctl/nn/memory_estimate.h"
#include "ampctl/nn/models.h"

namespace ampctl::nn {

std::unique_ptr<Sequential> make_mlp(const MlpOptions& options, int64_t in_features,
                                     int64_t out_features, DropoutRng* dropout_rng) {
  if (!(options.dropout >= 0.0 && options.dropout < 1.0)) {
    throw Error{ErrorKind::invalid_argument,
                "model.dropout: must be in [0, 1), got " + std::to_string(options.dropout)};
  }
  auto seq = std::make_unique<Sequential>();
  int64_t width = in_features;
  for (int64_t h : options.hidden) {
    seq->append(std::make_unique<Linear>(width, h));
    if (options.layer_norm) seq->append(std::make_unique<LayerNorm>(h));
    seq->append(std::make_unique<Activation>(options.activation, h));
    if (options.dropout > 0.0) {
      seq->append(std::make_unique<Dropout>(static_cast<float>(options.dropout), h, dropout_rng));
    }
    width = h;
  }
  seq->append(std::make_unique<Linear>(width, out_features));
  return seq;
}

Mlp::Mlp(Backend& backend, const ModelOptions& options)
    : Model(backend, options, ModelType::mlp),
      m_precision(options.precision),
      m_rng{options.seed, 0},
      m_loss(options.loss, options.out_features) {
  m_layers = make_mlp(options.mlp, m_in, m_out, &m_rng);
  m_layers->declare(m_layout, "layers");
  allocate_params([&](std::span<float> host) { m_layers->init(host, m_layout, options.seed); });
  m_layers->setup(backend, m_layout, m_arenas, m_max_batch, m_act, /*input_grad=*/false);
  m_loss.setup(backend, m_max_batch, m_act, m_arenas.numerics);
  m_input = RowViews(backend.zeros({m_max_batch, m_in}, m_act));
}

std::string Mlp::summary() const {
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
  os << "total params " << num_params() << " (" << m_precision << ": " << dtype_name(m_act)
     << " activations, f32 master weights)\n";
  return os.str();
}

const Tensor& Mlp::forward(const Tensor& input, int64_t batch, bool training) {
  if (batch < 1 || batch > m_max_batch) {
    throw Error{ErrorKind::invalid_argument, "model forward: batch " + std::to_string(batch) +
                                                 " outside [1, " + std::to_string(m_max_batch) +
                                                 "]"};
  }
  // [..., in_features]: the leading dimensions fold into rows.
  const Tensor x = fold_rows(input, m_in);
  check_matrix(x, batch, m_in, DType::f32, /*exact=*/false, "model forward input");
  if (x.device() != m_backend->device()) {
    throw Error{ErrorKind::invalid_argument,
                "model forward input " + x.describe() + " is not on " + m_backend->device().str()};
  }
  m_seeded = false;
  m_forward_batch = 0;  // stays 0 if an op throws
  // autocast casts the f32 batch once, before the first matrix product (fp32: a copy, so that
  // backward never depends on the caller's buffer).
  const Tensor& in = m_input.rows(batch);
  m_backend->cast(m_x_rows.of(x, batch), in);
  m_logits = &m_layers->forward(in, batch, training);
  m_forward_batch = batch;
  return *m_logits;
}

void Mlp::loss(const Tensor& targets, int64_t batch, const Tensor& loss_out,
               const Tensor& correct_out, const Tensor& grad_scale) {
  check_loss_batch("model", "rows", batch, m_forward_batch);
  m_seeded = false;
  m_seeded = m_loss.forward(*m_logits, targets, batch, loss_out, correct_out, grad_scale);
}

void Mlp::backward(int64_t batch) {
  check_backward_batch("model", "rows", m_seeded, batch, m_forward_batch);
  // One backward per seeded loss, as autograd frees its graph: a second call would add the
  // same gradients twice.
  m_seeded = false;
  m_layers->backward(m_loss.grad(batch), batch);
}

nlohmann::json Mlp::rng_state() const {
  return dropout_rng_state(m_rng);
}

void Mlp::set_rng_state(const nlohmann::json& state) {
  m_rng = dropout_rng_from_state(state);
}

ModelMemory Mlp::estimate(const ModelOptions& o, const Backend*) {
  const DenseCount c =
      dense_stack_count(o.in_features, o.mlp.hidden, o.out_features, o.mlp.layer_norm);
  ModelMemory m = per_row_memory(c, o.in_features, o.out_features, o.mlp.hidden, o.max_batch);
  // The names as the model declares them (no tensor is allocated by declaring), with every width
  // 1: the names do not depend on the sizes, whose limits are checked above.
  MlpOptions shape = o.mlp;
  std::fill(shape.hidden.begin(), shape.hidden.end(), int64_t{1});
  DropoutRng rng{0, 0};
  FlatLayout layout;
  make_mlp(shape, 1, 1, &rng)->declare(layout, "layers");
  for (const FlatLayout::Entry& e : layout.entries()) m.parameter_names.push_back(e.name);
  return m;
}

}  // namespace ampctl::nn
