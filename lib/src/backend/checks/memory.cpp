// The memory family's argument checks (checks.h; backend.h, "memory"), shared by both backends.
#include <cmath>
#include <cstdint>
#include <string>

#include "checks.h"

namespace ampctl {

void check_upload(const Tensor& dst, size_t bytes, const Device& device) {
  checks::on(dst, device, "upload", "destination");
  if (bytes != dst.nbytes()) {
    checks::fail("upload", std::to_string(bytes) + " bytes given for " + dst.describe() + " of " +
                               std::to_string(dst.nbytes()) + " bytes");
  }
}

void check_download(const Tensor& src, const Device& device) {
  checks::on(src, device, "download", "source");
}

void check_copy(const Tensor& dst, const Tensor& src, const Device& device) {
  checks::on(dst, device, "copy", "destination");
  checks::on(src, device, "copy", "source");
  if (dst.dtype() != src.dtype()) {
    checks::fail("copy", "destination " + dst.describe() + " and source " + src.describe() +
                             " differ in dtype (use cast)");
  }
  checks::same_numel(dst, "destination", src, "source", "copy");
}

void check_fill(const Tensor& dst, double value, const Device& device) {
  checks::on(dst, device, "fill", "destination");
  if (dst.dtype() == DType::i32 &&
      (value != std::trunc(value) || value < -2147483648.0 || value > 2147483647.0)) {
    checks::fail("fill", std::to_string(value) + " is not an int32 value");
  }
}

void check_cast(const Tensor& src, const Tensor& dst, const Device& device) {
  checks::on(src, device, "cast", "source");
  checks::on(dst, device, "cast", "destination");
  checks::same_numel(src, "source", dst, "destination", "cast");
}

void check_mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out,
                             const Device& device) {
  const char* op = "mul_scalar_tensor";
  checks::on(x, device, op, "x");
  checks::on(out, device, op, "out");
  checks::scalar(scale, DType::f32, device, op, "scale");
  checks::floating(x, op, "x");
  checks::floating(out, op, "out");
  checks::same_numel(x, "x", out, "out", op);
}

void check_add(const Tensor& dst, const Tensor& src, const Device& device) {
  checks::on(dst, device, "add_", "dst");
  checks::on(src, device, "add_", "src");
  checks::floating(dst, "add_", "dst");
  checks::floating(src, "add_", "src");
  checks::same_numel(dst, "dst", src, "src", "add_");
}

int64_t check_gather_rows(const Tensor& src, const Tensor& index, int64_t offset, const Tensor& dst,
                          const Device& device) {
  checks::on(src, device, "gather_rows", "src");
  checks::on(index, device, "gather_rows", "index");
  checks::on(dst, device, "gather_rows", "dst");
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
