// Tensor: a typed, shaped, contiguous view into a Storage that lives on one device.
//
// Storage is reference counted and freed by the deleter of the backend that allocated it, so
// core does not depend on CUDA. Views (Tensor::view) share the storage; that is how modules
// hold their parameters inside one flat arena (see FlatLayout). A default-constructed Tensor is
// "undefined" and stands for "absent" in op arguments.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/core/half.h"
#include "ampctl/core/limits.h"

namespace ampctl {

enum class DType : uint8_t { f32, f16, bf16, i32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "f16", "bf16", "i32"
bool is_floating(DType dtype);
// Parses a dtype name; throws Error{input} naming `what` for anything else.
DType parse_dtype(const std::string& name, const std::string& what);

// The largest finite value of the half type `lowp` rounds to: bf16's for bf16, else fp16's.
constexpr double max_finite(DType lowp) {
  return lowp == DType::bf16 ? kBf16MaxFinite : kHalfMaxFinite;
}
// The headroom of a magnitude x > 0 below the largest finite value, in binades:
// log2(max_finite / x) (the grad_amax and numerics headroom of the metrics, replay and report).
inline double headroom_log2(double max_finite, double x) {
  return std::log2(max_finite / x);
}

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  std::string str() const;  // "cpu" or "cuda:N"
  bool operator==(const Device&) const = default;
};

// A tensor's dimensions, stored inline (at most kMaxRank), so that making a Shape, copying a
// Tensor or making a view allocates nothing (a copy or a view only bumps the storage's reference
// count): a training step makes views and passes tensors by value freely. What does allocate:
// to_vector() and the conversion to std::vector, and the messages of the errors thrown.
class Shape {
 public:
  static constexpr size_t kMaxRank = 6;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using size_type = size_t;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.data() + dims.size()); }
  template <typename It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  size_t size() const { return m_rank; }
  bool empty() const { return m_rank == 0; }
  int64_t* data() { return m_dims; }
  const int64_t* data() const { return m_dims; }
  int64_t* begin() { return m_dims; }
  int64_t* end() { return m_dims + m_rank; }
  const int64_t* begin() const { return m_dims; }
  const int64_t* end() const { return m_dims + m_rank; }
  int64_t& operator[](size_t i) { return m_dims[i]; }
  int64_t operator[](size_t i) const { return m_dims[i]; }
  int64_t at(size_t i) const {
    if (i >= m_rank) {
      throw Error{ErrorKind::invalid_argument, "dimension " + std::to_string(i) +
                                                   " out of range for a rank-" +
                                                   std::to_string(m_rank) + " shape"};
    }
    return m_dims[i];
  }
  int64_t back() const { return at(m_rank == 0 ? 0 : m_rank - 1); }
  void push_back(int64_t d) {
    if (m_rank == kMaxRank) {
      throw Error{ErrorKind::invalid_argument,
                  "tensors have at most " + std::to_string(kMaxRank) + " dimensions"};
    }
    m_dims[m_rank++] = d;
  }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  operator std::vector<int64_t>() const { return to_vector(); }
  bool operator==(const Shape& o) const {
    if (m_rank != o.m_rank) return false;
    for (size_t i = 0; i < m_rank; ++i)
      if (m_dims[i] != o.m_dims[i]) return false;
    return true;
  }

 private:
  void assign(const int64_t* first, const int64_t* last) {
    m_rank = 0;
    for (; first != last; ++first) push_back(*first);
  }
  int64_t m_dims[kMaxRank] = {};
  size_t m_rank = 0;
};
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[256, 32]"

class Storage {
 public:
  using Deleter = std::function<void(void*)>;
  Storage(void* data, size_t bytes, Device device, Deleter deleter)
      : m_data(data), m_bytes(bytes), m_device(device), m_deleter(std::move(deleter)) {}
  ~Storage() {
    if (m_data && m_deleter) m_deleter(m_data);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return m_data; }
  size_t bytes() const { return m_bytes; }
  Device device() const { return m_device; }

 private:
  void* m_data;
  size_t m_bytes;
  Device m_device;
  Deleter m_deleter;
};

// Allocates 64-byte aligned host memory (for vector loads); the storage frees it.
std::shared_ptr<Storage> allocate_host_storage(size_t bytes);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);

  // A zero-initialised host tensor.
  static Tensor host(const Shape& shape, DType dtype);

  bool defined() const { return m_storage != nullptr; }
  DType dtype() const { return m_dtype; }
  const Shape& shape() const { return m_shape; }
  int64_t dim(size_t i) const { return m_shape.at(i); }
  size_t rank() const { return m_shape.size(); }
  size_t numel() const { return m_numel; }
  size_t nbytes() const { return m_numel * dtype_size(m_dtype); }
  Device device() const;
  bool is_cpu() const { return device().type == DeviceType::cpu; }

  void* data() const;
  template <typename T>
  T* data_as() const {
    check_dtype(DTypeOf<T>::value);
    return static_cast<T*>(data());
  }

  // `numel(shape)` elements starting `element_offset` elements into this tensor.
  Tensor view(size_t element_offset, const Shape& shape) const;
  // The same elements with another shape of equal numel.
  Tensor reshape(const Shape& shape) const;
  // The whole tensor as one dimension.
  Tensor flatten() const { return reshape({static_cast<int64_t>(m_numel)}); }

  bool shares_storage_with(const Tensor& other) const { return m_storage == other.m_storage; }
  std::string describe() const;  // "f16[256, 32] on cpu"

  // Throws Error{invalid_argument} when the dtype differs (message names both).
  void check_dtype(DType expected) const;

 private:
  std::shared_ptr<Storage> m_storage;
  size_t m_offset = 0;  // bytes
  Shape m_shape;
  DType m_dtype = DType::f32;
  size_t m_numel = 0;
};

// Names, shapes and offsets of tensors packed into one flat buffer. Every tensor starts on a
// kAlignElements boundary so vectorised passes over a single tensor stay aligned; the padding
// between tensors is zero-filled by whoever allocates the buffer and never read as data.
class FlatLayout {
 public:
  static constexpr size_t kAlignElements = 16;

  struct Entry {
    std::string name;
    Shape shape;
    size_t offset;  // elements
    size_t numel;
  };

  // Appends a tensor; returns its offset in elements.
  size_t add(const std::string& name, const Shape& shape);
  size_t total() const { return m_total; }
  const std::vector<Entry>& entries() const { return m_entries; }
  // The entries as views into `flat` (which must hold at least total() elements).
  std::vector<Tensor> views(const Tensor& flat) const;

 private:
  std::vector<Entry> m_entries;
  size_t m_total = 0;
};

}  // namespace ampctl
