// The CUDA backend's neural-network ops: argument checks here, arithmetic in kernels/ (which
// call math/nn_math.h, the per-element math the CPU backend runs) and, for the Linear layer's
// product, cuBLASLt.
//
// linear_forward: y = round_y(x @ w^T + b) with the bias added to the float accumulator before
// the one rounding. cuBLASLt's BIAS epilogue does exactly that (D = alpha * acc + bias in the
// float scale type, then converted to D's type), but its bias must have D's type
// (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: "Bias vector elements are the same type as the
// elements of output matrix (Dtype)", exceptions only for int8 and fp8 kernels). So:
//   * no bias, or a bias of y's dtype (then float(b) is exactly the value the epilogue adds), and
//     cuBLASLt can write y's dtype from the inputs: the product goes straight into y;
//   * otherwise (the usual mixed-precision case: f16/bf16 y with the f32 master bias) the product
//     goes into an f32 workspace with an f32 bias epilogue (the bias widened there first when it
//     is a 16-bit type), and one cast rounds it into y. acc + b is a float addition on both paths,
//     as on the CPU, and y is rounded once from it. Rounding the bias to y's dtype to use the
//     epilogue directly is not done: it would change the result whenever the bias is not
//     representable, and checking that would need a host sync.
//   * x and w of different dtypes are both read as f32 (widened exactly into the workspace).
//   * when cuBLASLt's heuristic offers no algorithm for a layout (odd alignments), cublasGemmEx
//     writes the f32 product and kernels::launch_bias_add_round adds the bias and rounds.
// Determinism: the heuristic runs once per (types, shape, alignments) and its algorithm is cached,
// split-K is limited to no reduction or a separate reduction kernel in float
// (CUBLASLT_REDUCTION_SCHEME_NONE | _COMPUTE_TYPE: never in-place or in the output type, which
// would round twice), compute is CUBLAS_COMPUTE_32F (no TF32), and the stream is the backend's
// one: cuBLAS then gives the same bits on every run on the same GPU model.
//
// The reductions (sum_rows, the losses, LayerNorm) write per-block or per-row partial results to a
// grow-only workspace and reduce them in a fixed order: no atomics, no host sync.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "cuda_backend.h"
#include "memory_cast.cuh"
#include "nn_activation.cuh"
#include "nn_clip.cuh"
#include "nn_dropout.cuh"
#include "nn_layer_norm.cuh"
#include "nn_linear.cuh"
#include "nn_mse.cuh"
#include "nn_rms_norm.cuh"
#include "nn_swiglu.cuh"
#include "nn_xent.cuh"

namespace ampctl::cuda_detail {
namespace {

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment classes).
unsigned alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  unsigned alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// Workspace regions start on 256-byte boundaries (cudaMalloc's alignment), so every operand placed
// there is as aligned as cuBLASLt can use.
size_t region(size_t floats) {
  return (floats + 63) / 64 * 64;
}

struct LtPreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const { (void)cublasLtMatmulPreferenceDestroy(p); }
};
using LtPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtPreferenceDeleter>;

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute,
                    const T& value) {
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
}

LtLayout make_layout(DType type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  AMPCTL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &layout, cuda_data_type(type), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  return LtLayout(layout);
}

}  // namespace

// The heuristic's first algorithm for a plan whose descriptor and layouts are set: has_algo
// stays false when cuBLASLt supports none (the caller composes instead); other errors throw.
static void pick_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                      cublasLtMatmulPreference_t pref, LinearPlan& plan) {
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt, desc, plan.w_layout.get(), plan.x_layout.get(), plan.d_layout.get(), plan.d_layout.get(),
      pref, 1, &result, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = result.algo;
    plan.has_algo = true;
  } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
    throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  }
}

// ---- linear_forward ----

LinearPlan& CudaBackend::linear_plan(const LinearPlanKey& key, const void* bias) {
  if (auto it = m_linear_plans.find(key); it != m_linear_plans.end()) return it->second;
  LinearPlan plan;
  cublasLtMatmulDesc_t desc = nullptr;
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan.desc.reset(desc);
  // Row-major y [R, O] is column-major y^T [O, R]: y^T = op(w^T...) as (w as column-major [I, O])^T
  // times (x as column-major [I, R]); cuBLASLt's A is w (transposed), B is x, D is y.
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
           key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  // The bias type is left at its default, D's type (the only one cuBLASLt takes for these types).
  if (key.bias) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  plan.w_layout = make_layout(key.in_type, key.in, key.out, key.in);
  plan.x_layout = make_layout(key.in_type, key.in, key.rows, key.in);
  plan.d_layout = make_layout(key.d_type, key.out, key.rows, key.out);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
  LtPreference pref(pref_raw);
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<uint64_t>(kCublasWorkspaceBytes));
  // Split-K only with the partial sums kept in float and reduced by a separate kernel (or not at
  // all): in-place or output-type reductions would round the partial sums to y's dtype.
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE |
                                       CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{key.align_w});
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t{key.align_x});
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t{key.align_d});
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t{key.align_d});

  pick_algo(m_cublas_lt.get(), desc, pref_raw, plan);
  return m_linear_plans.emplace(key, std::move(plan)).first->second;
}

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& y) {
  const char* op = "linear_forward";
  const LinearDims d = check_linear_forward(x, w, b, y, m_device);
  const int64_t rows = d.rows, in = d.in, out = d.out;
  // cuBLASLt takes int dimensions: a limit of this backend, not of the op.
  for (int64_t d : {rows, in, out}) {
    if (d > INT_MAX)
      invalid(std::string(op) + ": dimension " + std::to_string(d) + " exceeds cuBLAS's int range");
  }
  if (rows == 0 || out == 0) return;
  DeviceScope scope(m_device.index);
  const ElemType b_type = b.defined() ? elem_type(b.dtype()) : ElemType::f32;
  if (in == 0) {  // an empty product: y = round(0 + b)
    kernels::launch_bias_add_round(nullptr, b.defined() ? b.data() : nullptr, b_type, y.data(),
                                   elem_type(y.dtype()), rows, out, stream());
    return;
  }

  const bool mixed = x.dtype() != w.dtype();
  const DType in_type = mixed ? DType::f32 : x.dtype();
  const bool widen_x = x.dtype() != in_type;
  const bool widen_w = w.dtype() != in_type;
  // cuBLASLt with 32-bit compute writes f32 from any of our input types, and f16/bf16 from the
  // same type; the bias must have the output's type (see the top of this file).
  const bool y_writable = y.dtype() == DType::f32 || y.dtype() == in_type;
  const bool d_direct =
      y_writable && (!b.defined() || b.dtype() == y.dtype() || y.dtype() == DType::f32);
  const DType d_type = d_direct ? y.dtype() : DType::f32;
  const bool widen_b = b.defined() && b.dtype() != d_type;  // then d_type is f32

  // Workspace regions, in order: widened x, widened w, the f32 product (unless it goes straight
  // to y), the widened bias.
  const size_t x_floats = widen_x ? region(x.numel()) : 0;
  const size_t w_floats = widen_w ? region(w.numel()) : 0;
  struct Regions {
    float *x, *w, *d, *b;
  };
  auto regions = [&](bool with_d, bool with_b) {
    const size_t d_floats = with_d ? region(y.numel()) : 0;
    const size_t b_floats = with_b ? region(b.numel()) : 0;
    float* ws = grow_workspace(m_linear_workspace, x_floats + w_floats + d_floats + b_floats,
                               "the linear_forward workspace");
    return Regions{ws, ws + x_floats, ws + x_floats + w_floats,
                   ws + x_floats + w_floats + d_floats};
  };
  Regions ws = regions(!d_direct, widen_b);
  const void* x_ptr = widen_x ? ws.x : x.data();
  const void* w_ptr = widen_w ? ws.w : w.data();
  void* d_ptr = d_direct ? y.data() : ws.d;
  const void* bias_ptr = !b.defined() ? nullptr : (widen_b ? ws.b : b.data());

  const LinearPlanKey key{in_type,
                          d_type,
                          b.defined(),
                          rows,
                          in,
                          out,
                          alignment_of(x_ptr),
                          alignment_of(w_ptr),
                          alignment_of(d_ptr),
                          b.defined() ? alignment_of(bias_ptr) : 0u};
  const LinearPlan& plan = linear_plan(key, bias_ptr);
  if (!plan.has_algo) {
    // Fallback: cublasGemmEx into an f32 region, then the bias and the rounding by a kernel. The
    // workspace may grow here, before anything of this call is queued.
    ws = regions(true, false);
    x_ptr = widen_x ? ws.x : x.data();
    w_ptr = widen_w ? ws.w : w.data();
  }

  if (widen_x) {
    kernels::launch_cast(x.data(), elem_type(x.dtype()), ws.x, ElemType::f32, x.numel(), stream());
  }
  if (widen_w) {
    kernels::launch_cast(w.data(), elem_type(w.dtype()), ws.w, ElemType::f32, w.numel(), stream());
  }
  const float alpha = 1.0f, beta = 0.0f;
  if (plan.has_algo) {
    if (widen_b) {
      kernels::launch_cast(b.data(), elem_type(b.dtype()), ws.b, ElemType::f32, b.numel(),
                           stream());
    }
    if (b.defined()) set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
    AMPCTL_CUBLAS_CHECK(cublasLtMatmul(
        m_cublas_lt.get(), plan.desc.get(), &alpha, w_ptr, plan.w_layout.get(), x_ptr,
        plan.x_layout.get(), &beta, d_ptr, plan.d_layout.get(), d_ptr, plan.d_layout.get(),
        &plan.algo, m_cublas_workspace.get(), m_cublas_workspace.bytes(), stream()));
    if (!d_direct) {
      kernels::launch_cast(ws.d, ElemType::f32, y.data(), elem_type(y.dtype()), y.numel(),
                           stream());
    }
    return;
  }
  const cudaDataType ab_type = cuda_data_type(in_type);
  AMPCTL_CUBLAS_CHECK(cublasGemmEx(m_cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                   static_cast<int>(rows), static_cast<int>(in), &alpha, w_ptr,
                                   ab_type, static_cast<int>(in), x_ptr, ab_type,
                                   static_cast<int>(in), &beta, ws.d, CUDA_R_32F,
                                   static_cast<int>(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  kernels::launch_bias_add_round(ws.d, b.defined() ? b.data() : nullptr, b_type, y.data(),
                                 elem_type(y.dtype()), rows, out, stream());
}

// ---- linear_gelu_forward / linear_gelu_backward_input: cuBLASLt's GELU epilogues ----
//
// Forward: one matmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without a bias): in the
// float epilogue v = acc + b, AUX := round(v) (the pre-activation, "GELU input matrix", AUX of
// D's type by default: cublasLt.h, EPILOGUE_AUX_DATA_TYPE) and D := round(gelu(v)). Backward:
// CUBLASLT_EPILOGUE_DGELU, D := round(acc * gelu'(AUX)) with acc = dy w in float. cuBLASLt's GELU
// is the tanh approximation (PyTorch's _addmm_activation uses this epilogue for
// gelu(approximate='tanh'), pytorch/pytorch#104061); how it evaluates tanh is not documented.
// So the fused pair differs from the composition (Backend's default, the CPU's) in three ways,
// all bounded in tests/cuda/test_cuda_nn.cpp (linear_gelu_* cases):
//   * forward, GELU reads the float v, not its rounding to lowp (half an ulp of pre apart);
//   * backward, acc is not rounded to lowp before the multiplication (autocast rounds it);
//   * cuBLASLt's own tanh (bounded by an absolute error of 2^-10, what a hardware tanh.approx
//     keeps to) and its own order of float operations.
// Not used: DGELU_BGRAD (the bias gradient in the epilogue): its cross-tile reduction order is
// not documented, and the bias gradient stays sum_rows' deterministic one (of the rounded dpre,
// as the composition sums it). AUX_LD must be a multiple of 8 (cublasLt.h, EPILOGUE_AUX_LD):
// the GELU width; every pointer is asked to be 16-byte aligned, and forward's input width to be a
// multiple of 8 (linear_gelu_forward says why). Anything else, or no algorithm
// from the heuristic, or AMPCTL_GELU=composed (for A/B comparisons), takes the composition.

namespace {

// AMPCTL_GELU (read once): unset or "fused", the epilogues; "composed", Backend's composition.
bool gelu_fusion_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("AMPCTL_GELU");
    return !(env != nullptr && std::string(env) == "composed");
  }();
  return enabled;
}

bool aligned16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && alignment_of(t->data()) < 16) return false;
  }
  return true;
}

// A launch cuBLASLt refused as not supported (its checks run before anything is queued): the
// plan is marked so that later calls compose at once, and the caller composes this one. Other
// errors throw.
bool gelu_refused(cublasStatus_t status, LinearPlan& plan) {
  if (status == CUBLAS_STATUS_SUCCESS) return false;
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    throw_cublas_error(status, "cublasLtMatmul (GELU epilogue)", __FILE__, __LINE__);
  }
  plan.has_algo = false;
  return true;
}

bool within_int(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d < 1 || d > INT_MAX) return false;
  }
  return true;
}

}  // namespace

bool CudaBackend::linear_gelu_fused(DType dtype, int64_t width) const {
  return gelu_fusion_enabled() && (dtype == DType::f16 || dtype == DType::bf16) && width > 0 &&
         width % 8 == 0;
}

LinearPlan& CudaBackend::gelu_plan(const GeluPlanKey& key, const void* bias, const void* aux) {
  if (auto it = m_gelu_plans.find(key); it != m_gelu_plans.end()) return it->second;
  LinearPlan plan;
  cublasLtMatmulDesc_t desc = nullptr;
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan.desc.reset(desc);
  // Column-major D [m, n]. Forward: y^T [O, R] = (w as [I, O])^T x^T [I, R]. Backward:
  // dpre^T [I, R] = (w as [I, O]) dy^T [O, R].
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, key.backward ? CUBLAS_OP_N : CUBLAS_OP_T);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cublasLtEpilogue_t epilogue = key.backward ? CUBLASLT_EPILOGUE_DGELU
                                      : key.bias   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                   : CUBLASLT_EPILOGUE_GELU_AUX;
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  // The bias and AUX types are left at their defaults, D's type.
  if (key.bias) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{key.m});
  plan.w_layout = key.backward ? make_layout(key.dtype, key.m, key.k, key.m)
                               : make_layout(key.dtype, key.k, key.m, key.k);
  plan.x_layout = make_layout(key.dtype, key.k, key.n, key.k);
  plan.d_layout = make_layout(key.dtype, key.m, key.n, key.m);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  AMPCTL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
  LtPreference pref(pref_raw);
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<uint64_t>(kCublasWorkspaceBytes));
  // As linear_plan: split-K only with float partial sums reduced by a separate kernel.
  set_preference(pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE |
                                       CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  for (auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    set_preference(pref_raw, attribute, uint32_t{16});
  }
  pick_algo(m_cublas_lt.get(), desc, pref_raw, plan);
  return m_gelu_plans.emplace(key, std::move(plan)).first->second;
}

void CudaBackend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                      const Tensor& pre, const Tensor& y) {
  check_linear_gelu_forward(x, w, b, pre, y, m_device);
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  const DType d = y.dtype();
  // in % 8: rows of x and w 16-byte aligned. For an `in` that is not (37 x 45 x 64 in f16 with a
  // bias, on an H200), the algorithm cuBLASLt picked rounded the product to f16 before adding the
  // bias: the pre-activation up to half an ulp of the product off the composition's, outside the
  // float epilogue described above. Those take the composition.
  const bool fusable = linear_gelu_fused(d, out) && in % 8 == 0 && x.dtype() == d &&
                       w.dtype() == d && (!b.defined() || b.dtype() == d) &&
                       within_int({rows, in, out}) && aligned16({&x, &w, &b, &pre, &y});
  if (!fusable) {
    Backend::linear_gelu_forward(x, w, b, pre, y);
    return;
  }
  DeviceScope scope(m_device.index);
  const GeluPlanKey key{false,
                        d,
                        b.defined(),
                        out,
                        rows,
                        in,
                        alignment_of(pre.data()),
                        b.defined() ? alignment_of(b.data()) : 0u};
  const void* bias = b.defined() ? b.data() : nullptr;
  void* aux = pre.data();
  LinearPlan& plan = gelu_plan(key, bias, aux);
  if (!plan.has_algo) {
    Backend::linear_gelu_forward(x, w, b, pre, y);
    return;
  }
  if (b.defined()) set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(
      m_cublas_lt.get(), plan.desc.get(), &alpha, w.data(), plan.w_layout.get(), x.data(),
      plan.x_layout.get(), &beta, y.data(), plan.d_layout.get(), y.data(), plan.d_layout.get(),
      &plan.algo, m_cublas_workspace.get(), m_cublas_workspace.bytes(), stream());
  if (gelu_refused(status, plan)) Backend::linear_gelu_forward(x, w, b, pre, y);
}

void CudaBackend::linear_gelu_backward_input(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                             const Tensor& dpre, const Tensor& scratch) {
  check_linear_gelu_backward(dy, w, pre, dpre, scratch, m_device);
  const int64_t rows = dy.dim(0), out = dy.dim(1), in = w.dim(1);
  const DType d = dpre.dtype();
  const bool fusable = linear_gelu_fused(d, in) && dy.dtype() == d && w.dtype() == d &&
                       within_int({rows, in, out}) && aligned16({&dy, &w, &pre, &dpre});
  if (!fusable) {
    Backend::linear_gelu_backward_input(dy, w, pre, dpre, scratch);
    return;
  }
  DeviceScope scope(m_device.index);
  const GeluPlanKey key{true, d, false, in, rows, out, alignment_of(pre.data()), 0u};
  const void* aux = pre.data();
  LinearPlan& plan = gelu_plan(key, nullptr, aux);
  if (!plan.has_algo) {
    Backend::linear_gelu_backward_input(dy, w, pre, dpre, scratch);
    return;
  }
  set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status =
      cublasLtMatmul(m_cublas_lt.get(), plan.desc.get(), &alpha, w.data(), plan.w_layout.get(),
                     dy.data(), plan.x_layout.get(), &beta, dpre.data(), plan.d_layout.get(),
                     dpre.data(), plan.d_layout.get(), &plan.algo, m_cublas_workspace.get(),
                     m_cublas_workspace.bytes(), stream());
  if (gelu_refused(status, plan)) Backend::linear_gelu_backward_input(dy, w, pre, dpre, scratch);
}

// ---- reductions and elementwise ops ----

void CudaBackend::sum_rows(const Tensor& x, const Tensor& out) {
  check_sum_rows(x, out, m_device);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  DeviceScope scope(m_device.index);
  const size_t floats = kernels::sum_rows_workspace_floats(rows, cols);
  float* ws =
      floats > 0 ? grow_workspace(m_reduce_workspace, floats, "the reduction workspace") : nullptr;
  kernels::launch_sum_rows(x.data(), elem_type(x.dtype()), out.data(), elem_type(out.dtype()), rows,
                           cols, ws, stream());
}

void CudaBackend::activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y) {
  check_activation_forward(kind, x, y, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_activation_forward(kind, x.data(), elem_type(x.dtype()), y.data(),
                                     elem_type(y.dtype()), x.numel(), stream());
}

void CudaBackend::activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                      const Tensor& dy, const Tensor& dx) {
  check_activation_backward(kind, x, y, dy, dx, m_device);
  // relu and tanh read only the forward output, gelu only the input (nn_math.h): the other one
  // may be undefined, and is not read even when given.
  const bool reads_input = nn::activation_reads_input(kind);
  const Tensor& used = reads_input ? x : y;
  DeviceScope scope(m_device.index);
  const ElemType used_type = elem_type(used.dtype());
  kernels::launch_activation_backward(
      kind, reads_input ? x.data() : nullptr, reads_input ? used_type : ElemType::f32,
      reads_input ? nullptr : y.data(), reads_input ? ElemType::f32 : used_type, dy.data(),
      elem_type(dy.dtype()), dx.data(), elem_type(dx.dtype()), dy.numel(), stream());
}

void CudaBackend::dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed,
                                  uint64_t offset) {
  check_dropout(x, y, p, "dropout_forward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_dropout(x.data(), elem_type(x.dtype()), y.data(), elem_type(y.dtype()), p, seed,
                          offset, x.numel(), stream());
}

void CudaBackend::dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed,
                                   uint64_t offset) {
  check_dropout(dy, dx, p, "dropout_backward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_dropout(dy.data(), elem_type(dy.dtype()), dx.data(), elem_type(dx.dtype()), p,
                          seed, offset, dy.numel(), stream());
}

void CudaBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                        const Tensor& loss, const Tensor& correct,
                                        const Tensor& dlogits, const Tensor& grad_scale) {
  check_softmax_cross_entropy(logits, labels, loss, correct, dlogits, grad_scale, m_device);
  // The labels are clamped by the kernel (checking them would be a sync).
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  DeviceScope scope(m_device.index);
  float* ws =
      grow_workspace(m_reduce_workspace, std::max<size_t>(1, kernels::xent_workspace_floats(rows)),
                     "the reduction workspace");
  kernels::XentPointers p{};
  p.logits = logits.data();
  p.logits_type = elem_type(logits.dtype());
  p.labels = static_cast<const int32_t*>(labels.data());
  p.loss = static_cast<float*>(loss.data());
  p.correct = correct.defined() ? static_cast<int32_t*>(correct.data()) : nullptr;
  p.dlogits = dlogits.defined() ? dlogits.data() : nullptr;
  p.dlogits_type = dlogits.defined() ? elem_type(dlogits.dtype()) : ElemType::f32;
  p.grad_scale = dlogits.defined() ? static_cast<const float*>(grad_scale.data()) : nullptr;
  kernels::launch_softmax_cross_entropy(p, rows, cols, ws, stream());
}

void CudaBackend::mse(const Tensor& pred, const Tensor& target, const Tensor& loss,
                      const Tensor& dpred, const Tensor& grad_scale) {
  check_mse(pred, target, loss, dpred, grad_scale, m_device);
  DeviceScope scope(m_device.index);
  float* ws = grow_workspace(m_reduce_workspace, kernels::mse_workspace_floats(),
                             "the reduction workspace");
  kernels::launch_mse(pred.data(), elem_type(pred.dtype()),
                      static_cast<const float*>(target.data()), static_cast<float*>(loss.data()),
                      dpred.defined() ? dpred.data() : nullptr,
                      dpred.defined() ? elem_type(dpred.dtype()) : ElemType::f32,
                      dpred.defined() ? static_cast<const float*>(grad_scale.data()) : nullptr,
                      pred.numel(), ws, stream());
}

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                     float eps) {
  const std::array<int64_t, 2> rc =
      check_layer_norm_forward(x, gamma, beta, y, mean, rstd, m_device);
  const int64_t rows = rc[0], cols = rc[1];
  DeviceScope scope(m_device.index);
  kernels::launch_layer_norm_forward(x.data(), elem_type(x.dtype()),
                                     static_cast<const float*>(gamma.data()),
                                     static_cast<const float*>(beta.data()), y.data(),
                                     elem_type(y.dtype()), static_cast<float*>(mean.data()),
                                     static_cast<float*>(rstd.data()), eps, rows, cols, stream());
}

void CudaBackend::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta) {
  const std::array<int64_t, 2> rc =
      check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, m_device);
  const int64_t rows = rc[0], cols = rc[1];
  DeviceScope scope(m_device.index);
  const size_t floats = kernels::layer_norm_backward_workspace_floats(rows, cols);
  float* ws =
      floats > 0 ? grow_workspace(m_reduce_workspace, floats, "the reduction workspace") : nullptr;
  kernels::launch_layer_norm_backward(
      x.data(), elem_type(x.dtype()), static_cast<const float*>(gamma.data()),
      static_cast<const float*>(mean.data()), static_cast<const float*>(rstd.data()), dy.data(),
      elem_type(dy.dtype()), dx.defined() ? dx.data() : nullptr,
      dx.defined() ? elem_type(dx.dtype()) : ElemType::f32,
      dgamma.defined() ? static_cast<float*>(dgamma.data()) : nullptr,
      dbeta.defined() ? static_cast<float*>(dbeta.data()) : nullptr, rows, cols, ws, stream());
}

void CudaBackend::residual_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                              const Tensor& gamma, const Tensor& beta,
                                              const Tensor& y, const Tensor& mean,
                                              const Tensor& rstd, float eps) {
  const auto [rows, cols] =
      check_residual_layer_norm(x, r, sum, gamma, beta, y, mean, rstd, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_residual_layer_norm_forward(
      static_cast<const float*>(x.data()), r.data(), elem_type(r.dtype()),
      static_cast<float*>(sum.data()), static_cast<const float*>(gamma.data()),
      static_cast<const float*>(beta.data()), y.data(), elem_type(y.dtype()),
      static_cast<float*>(mean.data()), static_cast<float*>(rstd.data()), eps, rows, cols,
      stream());
}

void CudaBackend::layer_norm_backward_accumulate(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& dy, const Tensor& dx,
                                                 const Tensor& dgamma, const Tensor& dbeta,
                                                 const Tensor& scratch) {
  const auto [rows, cols] = check_layer_norm_backward_accumulate(x, gamma, mean, rstd, dy, dx,
                                                                 dgamma, dbeta, scratch, m_device);
  DeviceScope scope(m_device.index);
  const size_t floats = kernels::layer_norm_backward_workspace_floats(rows, cols);
  float* ws =
      floats > 0 ? grow_workspace(m_reduce_workspace, floats, "the reduction workspace") : nullptr;
  kernels::launch_layer_norm_backward(
      x.data(), elem_type(x.dtype()), static_cast<const float*>(gamma.data()),
      static_cast<const float*>(mean.data()), static_cast<const float*>(rstd.data()), dy.data(),
      elem_type(dy.dtype()), dx.data(), elem_type(dx.dtype()),
      dgamma.defined() ? static_cast<float*>(dgamma.data()) : nullptr,
      dbeta.defined() ? static_cast<float*>(dbeta.data()) : nullptr, rows, cols, ws, stream(),
      /*accumulate_dx=*/true);
}

void CudaBackend::clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) {
  check_clip_coef(norm, coef, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_clip_coef(static_cast<const float*>(norm.data()), max_norm,
                            static_cast<float*>(coef.data()), stream());
}

void CudaBackend::rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                                   const Tensor& rstd, float eps) {
  const auto [rows, cols] = check_rms_norm_forward(x, weight, y, rstd, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_rms_norm_forward(x.data(), elem_type(x.dtype()), weight.data_as<float>(),
                                   y.data(), elem_type(y.dtype()), rstd.data_as<float>(), eps, rows,
                                   cols, stream());
}

void CudaBackend::residual_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                            const Tensor& weight, const Tensor& y,
                                            const Tensor& rstd, float eps) {
  const auto [rows, cols] = check_residual_rms_norm(x, r, sum, weight, y, rstd, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_residual_rms_norm_forward(x.data_as<float>(), r.data(), elem_type(r.dtype()),
                                            sum.data_as<float>(), weight.data_as<float>(), y.data(),
                                            elem_type(y.dtype()), rstd.data_as<float>(), eps, rows,
                                            cols, stream());
}

void CudaBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                    const Tensor& dy, const Tensor& dx, const Tensor& dweight,
                                    bool accumulate, const Tensor& dy_weight) {
  const auto [rows, cols] =
      check_rms_norm_backward(x, weight, rstd, dy, dx, dweight, accumulate, dy_weight, m_device);
  DeviceScope scope(m_device.index);
  const size_t floats =
      dweight.defined() ? kernels::rms_norm_backward_workspace_floats(rows, cols) : 0;
  float* ws =
      floats > 0 ? grow_workspace(m_reduce_workspace, floats, "the reduction workspace") : nullptr;
  kernels::launch_rms_norm_backward(x.data(), elem_type(x.dtype()), weight.data_as<float>(),
                                    rstd.data_as<float>(), dy.data(), elem_type(dy.dtype()),
                                    dx.defined() ? dx.data() : nullptr,
                                    dx.defined() ? elem_type(dx.dtype()) : kernels::ElemType::f32,
                                    dweight.defined() ? dweight.data_as<float>() : nullptr,
                                    dy_weight.defined() ? dy_weight.data_as<float>() : nullptr,
                                    accumulate, rows, cols, ws, stream());
}

void CudaBackend::swiglu_forward(const Tensor& gate_up, const Tensor& y) {
  const auto [rows, width] = check_swiglu_forward(gate_up, y, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_swiglu_forward(gate_up.data(), elem_type(gate_up.dtype()), y.data(),
                                 elem_type(y.dtype()), rows, width, stream());
}

void CudaBackend::swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up,
                                  const Tensor& dy_up) {
  const auto [rows, width] = check_swiglu_backward(gate_up, dy, dgate_up, dy_up, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_swiglu_backward(
      gate_up.data(), elem_type(gate_up.dtype()), dy.data(), elem_type(dy.dtype()), dgate_up.data(),
      elem_type(dgate_up.dtype()), dy_up.defined() ? dy_up.data_as<float>() : nullptr, rows, width,
      stream());
}

}  // namespace ampctl::cuda_detail
