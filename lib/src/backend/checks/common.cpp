// The primitives every family's checks are written with (checks.h).
#include <string>

#include "checks.h"

namespace ampctl::checks {

void fail(const char* op, const std::string& what) {
  throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + what};
}

void on(const Tensor& t, const Device& device, const char* op, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + " is undefined");
  const Device d = t.device();
  if (d.type != device.type || (d.type == DeviceType::cuda && d.index != device.index)) {
    fail(op, std::string(name) + " is " + t.describe() + ", expected a tensor on " + device.str() +
                 " (move data with upload/download)");
  }
}

void floating(const Tensor& t, const char* op, const char* name) {
  if (!is_floating(t.dtype())) {
    fail(op, std::string(name) + " must be f32, f16 or bf16, got " + t.describe());
  }
}

void float_on(const Tensor& t, const Device& device, const char* op, const char* name) {
  on(t, device, op, name);
  floating(t, op, name);
}

void dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  if (t.dtype() != dtype) {
    fail(op, std::string(name) + " must be " + dtype_name(dtype) + ", got " + t.describe());
  }
}

void rank(const Tensor& t, size_t rank, const char* op, const char* name) {
  if (t.rank() != rank) {
    fail(op,
         std::string(name) + " must have rank " + std::to_string(rank) + ", got " + t.describe());
  }
}

void matrix(const Tensor& t, const char* op, const char* name) {
  if (t.rank() != 2) fail(op, std::string(name) + " must be a matrix, got " + t.describe());
}

void shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* op,
           const char* name) {
  bool same = t.rank() == shape.size();
  size_t i = 0;
  for (int64_t d : shape) {
    if (!same) break;
    same = t.dim(i++) == d;
  }
  if (!same) {
    fail(op, std::string(name) + " must have shape " + shape_str(Shape(shape)) + ", got " +
                 t.describe());
  }
}

void same_numel(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                const char* op) {
  if (a.numel() != b.numel()) {
    fail(op, std::string(a_name) + " " + a.describe() + " and " + b_name + " " + b.describe() +
                 " differ in element count");
  }
}

void same_shape(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                const char* ref_name) {
  if (t.shape() != ref.shape()) {
    fail(op, std::string(name) + " " + t.describe() + " and " + ref_name + " " + ref.describe() +
                 " must have one shape");
  }
}

void scalar(const Tensor& t, DType dtype, const Device& device, const char* op, const char* name) {
  on(t, device, op, name);
  if (t.dtype() != dtype || t.numel() != 1) {
    fail(op, std::string(name) + " must be a one-element " + dtype_name(dtype) + " tensor, got " +
                 t.describe());
  }
}

// Byte ranges on one device (the same address space for host and CUDA pointers).
bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

void disjoint(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
              const char* in_name) {
  if (overlaps(out, in)) {
    fail(op, std::string(out_name) + " " + out.describe() + " overlaps " + in_name + " " +
                 in.describe());
  }
}

}  // namespace ampctl::checks
