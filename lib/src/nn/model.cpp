#include "ampctl/nn/model.h"

#include <algorithm>
#include <vector>

#include "ampctl/nn/models.h"

namespace ampctl::nn {
namespace {

void check_size(int64_t v, const char* what) {
  if (v < 1) {
    throw Error{ErrorKind::invalid_argument,
                std::string("model: ") + what + " must be >= 1, got " + std::to_string(v)};
  }
}

}  // namespace

Model::Model(Backend& backend, const ModelOptions& o, ModelType type)
    : m_backend(&backend),
      m_type(type),
      m_act(o.compute),
      m_loss_kind(o.loss),
      m_in(o.in_features),
      m_out(o.out_features),
      m_max_batch(o.max_batch),
      m_numerics_wanted(o.numerics) {
  check_size(o.in_features, "in_features");
  check_size(o.out_features, "out_features");
  check_size(o.max_batch, "max_batch");
}

void Model::allocate_params(const std::function<void(std::span<float>)>& init) {
  Backend& b = *m_backend;
  const auto total = static_cast<int64_t>(m_layout.total());
  // zeros: the alignment padding between tensors must read as zero (FlatLayout's contract).
  m_arenas.params = b.zeros({total}, DType::f32);
  m_arenas.grads = b.zeros({total}, DType::f32);
  if (m_act != DType::f32) m_arenas.lowp = b.zeros({total}, m_act);
  // Initial values are drawn on the host, so every backend starts from the same bits.
  std::vector<float> host(static_cast<size_t>(total), 0.0f);
  init(host);
  b.upload(m_arenas.params, host.data(), host.size() * sizeof(float));
  sync_lowp();
  if (m_numerics_wanted && m_act != DType::f32) {
    m_numerics = std::make_unique<GradNumerics>(b, m_layout.entries().size(), m_act);
    m_arenas.numerics = m_numerics.get();
  }
}

void Model::check_loss_batch(const char* who, const char* unit, int64_t batch,
                             int64_t forward_batch) {
  if (forward_batch == 0 || batch != forward_batch) {
    throw Error{ErrorKind::state, std::string(who) + " loss: batch " + std::to_string(batch) +
                                      " does not match the last forward (" +
                                      std::to_string(forward_batch) + " " + unit + ")"};
  }
}

void Model::check_backward_batch(const char* who, const char* unit, bool seeded, int64_t batch,
                                 int64_t forward_batch) {
  if (!seeded || batch != forward_batch) {
    throw Error{ErrorKind::state,
                std::string(who) +
                    " backward: needs loss() with a grad_scale after a forward of the same "
                    "batch (" +
                    std::to_string(batch) + " " + unit + " asked, last forward " +
                    std::to_string(forward_batch) + ")"};
  }
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

void Model::sync_lowp() {
  if (m_arenas.lowp.defined()) m_backend->cast(m_arenas.params, m_arenas.lowp);
}

void Model::zero_grad() {
  m_backend->fill(m_arenas.grads, 0.0);
}

nlohmann::json dropout_rng_state(const DropoutRng& rng) {
  return {{"seed", rng.seed}, {"dropout_offset", rng.calls}};
}

DropoutRng dropout_rng_from_state(const nlohmann::json& state) {
  auto read = [&](const char* key) -> uint64_t {
    if (!state.is_object() || !state.contains(key) || !state.at(key).is_number_unsigned()) {
      throw Error{ErrorKind::input, std::string("model rng state: missing or mistyped key '") +
                                        key + "' (expected a non-negative integer)"};
    }
    return state.at(key).get<uint64_t>();
  };
  DropoutRng rng;
  rng.seed = read("seed");
  rng.calls = read("dropout_offset");
  return rng;
}

}  // namespace ampctl::nn
