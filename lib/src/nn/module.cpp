#include "ampctl/nn/module.h"

namespace ampctl::nn {

RowViews::RowViews(Tensor full) : m_full(std::move(full)) {
  if (m_full.rank() < 1) {
    throw Error{ErrorKind::invalid_argument,
                "RowViews: a tensor with rows is needed, got " + m_full.describe()};
  }
  for (auto& slot : m_slots) slot.first = -1;
}

const Tensor& RowViews::rows(int64_t n) {
  if (n == m_full.dim(0)) return m_full;
  if (n <= 0 || n > m_full.dim(0)) {
    throw Error{ErrorKind::invalid_argument,
                "batch of " + std::to_string(n) + " rows for a buffer of " + m_full.describe()};
  }
  for (const auto& slot : m_slots) {
    if (slot.first == n) return slot.second;
  }
  // A new row count: a new cached view.
  Shape shape = m_full.shape();
  shape[0] = n;
  auto& slot = m_slots[m_next];
  m_next = (m_next + 1) % kSlots;
  slot.second = m_full.view(0, shape);
  slot.first = n;
  return slot.second;
}

const Tensor& LeadingRows::of(const Tensor& src, int64_t n) {
  if (src.rank() >= 1 && src.dim(0) == n) return src;
  if (src.rank() < 1 || n <= 0 || n > src.dim(0)) {
    throw Error{ErrorKind::invalid_argument,
                "the first " + std::to_string(n) + " rows of " + src.describe() + " were asked"};
  }
  const bool same_source = m_source.defined() && m_source.shares_storage_with(src) &&
                           m_source.data() == src.data() && m_source.dtype() == src.dtype() &&
                           m_source.shape() == src.shape();
  if (!same_source) {
    m_source = src;
    for (auto& slot : m_slots) slot = {0, Tensor{}};
  }
  for (const auto& slot : m_slots) {
    if (slot.first == n) return slot.second;
  }
  Shape shape = src.shape();
  shape[0] = n;
  auto& slot = m_slots[m_next];
  m_next = (m_next + 1) % kSlots;
  slot.second = src.view(0, shape);
  slot.first = n;
  return slot.second;
}

void Module::declare(FlatLayout&, const std::string&) {}

void Module::init(std::span<float>, const FlatLayout&, uint64_t) const {}

void Module::collect_buffers(std::vector<std::pair<std::string, Tensor>>&) const {}

size_t Module::declare_param(FlatLayout& layout, const std::string& name, const Shape& shape) {
  layout.add(name, shape);
  const size_t entry = layout.entries().size() - 1;
  m_entries.push_back(entry);
  return entry;
}

ParamSlot Module::bind(const FlatLayout& layout, const ParamArenas& arenas, size_t entry) {
  const FlatLayout::Entry& e = layout.entries().at(entry);
  ParamSlot slot;
  slot.entry = entry;
  slot.param = arenas.params.view(e.offset, e.shape);
  slot.grad = arenas.grads.view(e.offset, e.shape);
  if (arenas.lowp.defined()) slot.lowp = arenas.lowp.view(e.offset, e.shape);
  return slot;
}

Tensor fold_rows(const Tensor& x, int64_t cols) {
  if (!x.defined() || x.rank() <= 2 || cols < 1 || x.dim(x.rank() - 1) != cols) return x;
  return x.view(0, {static_cast<int64_t>(x.numel()) / cols, cols});
}

void check_matrix(const Tensor& t, int64_t batch, int64_t cols, DType dtype, bool exact,
                  const char* what) {
  const bool ok = t.defined() && t.rank() == 2 && t.dtype() == dtype && t.dim(1) == cols &&
                  (exact ? t.dim(0) == batch : t.dim(0) >= batch);
  if (ok) return;
  throw Error{ErrorKind::invalid_argument, std::string(what) + ": expected a " + dtype_name(dtype) +
                                               " [" + (exact ? "" : ">= ") + std::to_string(batch) +
                                               ", " + std::to_string(cols) + "] tensor, got " +
                                               (t.defined() ? t.describe() : std::string("none"))};
}

}  // namespace ampctl::nn
