#include "ampctl/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "ampctl/core/checked.h"

namespace ampctl {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype != DType::i32;
}

DType parse_dtype(const std::string& name, const std::string& what) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    if (name == dtype_name(d)) return d;
  }
  throw Error{ErrorKind::input, what + ": unknown dtype '" + name + "'",
              "expected one of f32, f16, bf16, i32"};
}

std::string Device::str() const {
  if (type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(index);
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw Error{ErrorKind::invalid_argument, "negative dimension in " + shape_str(shape)};
    // Views are made inside the training step: the message is built only when it is needed.
    if (__builtin_mul_overflow(n, d, &n)) {
      throw Error{ErrorKind::invalid_argument,
                  "the element count of " + shape_str(shape) + " overflows a 64-bit size"};
    }
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::shared_ptr<Storage> allocate_host_storage(size_t bytes) {
  const size_t rounded = checked_add(bytes, size_t{63}, "a host allocation") / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) {
    throw Error{ErrorKind::runtime,
                "out of host memory allocating " + std::to_string(bytes) + " bytes"};
  }
  if (p) std::memset(p, 0, rounded);
  return std::make_shared<Storage>(p, bytes, Device{}, [](void* q) { std::free(q); });
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype)
    : m_storage(std::move(storage)),
      m_offset(byte_offset),
      m_shape(std::move(shape)),
      m_dtype(dtype),
      m_numel(static_cast<size_t>(shape_numel(m_shape))) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(m_numel, dtype_size(m_dtype), &bytes)) {
    throw Error{ErrorKind::invalid_argument,
                "the byte size of " + shape_str(m_shape) + " overflows a 64-bit size"};
  }
  if (m_storage && (m_offset > m_storage->bytes() || nbytes() > m_storage->bytes() - m_offset)) {
    throw Error{ErrorKind::invalid_argument, "tensor " + describe() + " at byte offset " +
                                                 std::to_string(m_offset) +
                                                 " does not fit its storage of " +
                                                 std::to_string(m_storage->bytes()) + " bytes"};
  }
}

Tensor Tensor::host(const Shape& shape, DType dtype) {
  const size_t bytes = checked_mul(static_cast<size_t>(shape_numel(shape)), dtype_size(dtype),
                                   "the byte size of " + shape_str(shape));
  return Tensor{allocate_host_storage(bytes), 0, shape, dtype};
}

Device Tensor::device() const {
  return m_storage ? m_storage->device() : Device{};
}

void* Tensor::data() const {
  if (!m_storage) throw Error{ErrorKind::invalid_argument, "access to an undefined tensor"};
  return static_cast<char*>(m_storage->data()) + m_offset;
}

Tensor Tensor::view(size_t element_offset, const Shape& shape) const {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  if (element_offset > m_numel || n > m_numel - element_offset) {
    throw Error{ErrorKind::invalid_argument, "view of " + shape_str(shape) + " at element " +
                                                 std::to_string(element_offset) + " exceeds " +
                                                 describe()};
  }
  return Tensor{m_storage, m_offset + element_offset * dtype_size(m_dtype), shape, m_dtype};
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (static_cast<size_t>(shape_numel(shape)) != m_numel) {
    throw Error{ErrorKind::invalid_argument,
                "cannot reshape " + describe() + " to " + shape_str(shape)};
  }
  return Tensor{m_storage, m_offset, shape, m_dtype};
}

std::string Tensor::describe() const {
  return std::string(dtype_name(m_dtype)) + shape_str(m_shape) + " on " + device().str();
}

void Tensor::check_dtype(DType expected) const {
  if (m_dtype != expected) {
    throw Error{ErrorKind::invalid_argument,
                std::string("expected a ") + dtype_name(expected) + " tensor, got " + describe()};
  }
}

size_t FlatLayout::add(const std::string& name, const Shape& shape) {
  const std::string what = "the parameter layout at " + name;
  const size_t offset =
      checked_add(m_total, kAlignElements - 1, what) / kAlignElements * kAlignElements;
  const size_t n = static_cast<size_t>(shape_numel(shape));
  // The arenas hold total() elements of up to 4 bytes each: that byte count must exist too.
  const size_t total = checked_add(offset, n, what);
  checked_mul(total, size_t{4}, what + " (bytes)");
  m_entries.push_back(Entry{name, shape, offset, n});
  m_total = total;
  return offset;
}

std::vector<Tensor> FlatLayout::views(const Tensor& flat) const {
  std::vector<Tensor> out;
  out.reserve(m_entries.size());
  for (const Entry& e : m_entries) out.push_back(flat.view(e.offset, e.shape));
  return out;
}

}  // namespace ampctl
