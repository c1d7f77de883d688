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

int64_t Backend::check_gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                                   const Tensor& dst) {
  index.check_dtype(DType::i32);
  if (src.dtype() != dst.dtype() || dtype_size(src.dtype()) != 4 || src.rank() < 1 ||
      src.rank() > 2 || dst.rank() != src.rank() || (src.rank() == 2 && src.dim(1) != dst.dim(1))) {
    throw Error{ErrorKind::invalid_argument,
                "gather_rows: src " + src.describe() + " and dst " + dst.describe() +
                    " must be [N, W] and [R, W] (or [N] and [R]) of one 4-byte dtype"};
  }
  const int64_t rows = dst.dim(0);
  if (offset < 0 || offset + rows > static_cast<int64_t>(index.numel())) {
    throw Error{ErrorKind::invalid_argument, "gather_rows: rows [" + std::to_string(offset) + ", " +
                                                 std::to_string(offset + rows) +
                                                 ") outside the index " + index.describe()};
  }
  const int64_t n = src.dim(0);
  return n > 0 ? static_cast<int64_t>(src.numel()) / n : 0;
}

}  // namespace ampctl
