#include "ampctl/nn/layers.h"

namespace ampctl::nn {

void Sequential::append(std::unique_ptr<Module> module) {
  if (!module) throw Error{ErrorKind::invalid_argument, "Sequential: null module"};
  if (!m_modules.empty() && m_modules.back()->out_features() != module->in_features()) {
    throw Error{ErrorKind::invalid_argument, "Sequential: " + module->describe() + " takes " +
                                                 std::to_string(module->in_features()) +
                                                 " features but " + m_modules.back()->describe() +
                                                 " gives " +
                                                 std::to_string(m_modules.back()->out_features())};
  }
  m_modules.push_back(std::move(module));
}

std::string Sequential::describe() const {
  return "Sequential(" + std::to_string(m_modules.size()) + " modules)";
}

int64_t Sequential::in_features() const {
  if (m_modules.empty()) throw Error{ErrorKind::state, "Sequential: empty"};
  return m_modules.front()->in_features();
}

int64_t Sequential::out_features() const {
  if (m_modules.empty()) throw Error{ErrorKind::state, "Sequential: empty"};
  return m_modules.back()->out_features();
}

void Sequential::declare(FlatLayout& layout, const std::string& prefix) {
  for (size_t i = 0; i < m_modules.size(); ++i) {
    m_modules[i]->declare(layout, prefix + "." + std::to_string(i));
  }
}

void Sequential::init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const {
  for (const auto& m : m_modules) m->init(host, layout, seed);
}

void Sequential::setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                       int64_t max_batch, DType act, bool input_grad) {
  for (size_t i = 0; i < m_modules.size(); ++i) {
    m_modules[i]->setup(backend, layout, arenas, max_batch, act, input_grad || i > 0);
  }
}

const Tensor& Sequential::forward(const Tensor& x, int64_t batch, bool training) {
  if (m_modules.empty()) throw Error{ErrorKind::state, "Sequential: empty"};
  // [..., in_features] -> [rows, in_features]: every child works row by row.
  m_input = fold_rows(x, m_modules.front()->in_features());
  const Tensor* h = &m_input;
  for (const auto& m : m_modules) h = &m->forward(*h, batch, training);
  return *h;
}

const Tensor& Sequential::backward(const Tensor& dy, int64_t batch) {
  const Tensor* g = &dy;
  for (size_t i = m_modules.size(); i-- > 0;) g = &m_modules[i]->backward(*g, batch);
  return *g;
}

void Sequential::collect_buffers(std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& m : m_modules) m->collect_buffers(out);
}

}  // namespace ampctl::nn
