#include "ampctl/backend/backend.h"

namespace ampctl {

Tensor Backend::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  fill(t, 0.0);
  return t;
}

Tensor Backend::from_host(const Shape& shape, DType dtype, const void* data) {
  Tensor t = empty(shape, dtype);
  upload(t, data, t.nbytes());
  return t;
}

Tensor Backend::to_host(const Tensor& t) {
  Tensor h = Tensor::host(t.shape(), t.dtype());
  download(h.data(), t);
  return h;
}

float Backend::read_scalar_f32(const Tensor& t) {
  t.check_dtype(DType::f32);
  if (t.numel() != 1) {
    throw Error{ErrorKind::invalid_argument, "expected a one-element tensor, got " + t.describe()};
  }
  float v = 0;
  download(&v, t);
  return v;
}

int32_t Backend::read_scalar_i32(const Tensor& t) {
  t.check_dtype(DType::i32);
  if (t.numel() != 1) {
    throw Error{ErrorKind::invalid_argument, "expected a one-element tensor, got " + t.describe()};
  }
  int32_t v = 0;
  download(&v, t);
  return v;
}

}  // namespace ampctl
