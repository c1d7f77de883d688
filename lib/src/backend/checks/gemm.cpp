// The gemm family's argument checks (checks.h; backend.h, "gemm"), shared by both backends.
#include <string>

#include "checks.h"

namespace ampctl {

GemmDims check_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    const Device& device) {
  const char* op = "gemm";
  checks::float_on(a, device, op, "A");
  checks::float_on(b, device, op, "B");
  checks::float_on(c, device, op, "C");
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2) {
    checks::fail(op, "A, B and C must be matrices, got A " + a.describe() + ", B " + b.describe() +
                         ", C " + c.describe());
  }
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t k_b = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != k_b || c.dim(0) != m || c.dim(1) != n) {
    checks::fail(op, "op(A) is " + shape_str({m, k}) + " (A " + a.describe() +
                         (trans_a ? ", transposed" : "") + "), op(B) is " + shape_str({k_b, n}) +
                         " (B " + b.describe() + (trans_b ? ", transposed" : "") + "), C is " +
                         c.describe() + "; expected op(A) [m, k], op(B) [k, n], C [m, n]");
  }
  return {m, n, k};
}

}  // namespace ampctl
