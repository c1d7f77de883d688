// cast: dst[i] := Dst(float(src[i])).
//
// Widening f16/bf16 to float is exact, so a float-to-float cast has exactly one rounding: the
// narrowing conversion of half.h, which on the device is the hardware cvt.rn instruction (round to
// nearest even, overflow to inf, subnormals kept) and matches half.h's portable host code bit for
// bit, except that NaNs come out as the canonical quiet NaN rather than with their payload.
// i32 goes through float both ways, as in the CPU backend: i32 -> float rounds to nearest even
// (cvt.rn.f32.s32) and is then rounded to f16/bf16 if needed; float -> i32 truncates toward zero
// like a C cast (cvt.rzi.s32.f32). Out-of-range values and NaN, which the CPU backend rejects with
// an error, saturate (NaN gives 0) here: the device cannot raise an error without a host sync.
// Equal types are a cudaMemcpyAsync, which keeps every bit.
//
// Invariants: one grid-stride pass, element i of dst depends only on element i of src.
#include <type_traits>

#include "ampctl/core/half.h"
#include "memory_cast.cuh"

namespace ampctl::kernels {

// kernels

template <typename Src, typename Dst>
static __global__ void cast_kernel(const Src* __restrict__ src, Dst* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = Dst(static_cast<float>(src[i]));
  }
}

// launchers

namespace {

size_t type_size(ElemType t) {
  return t == ElemType::f16 || t == ElemType::bf16 ? 2 : 4;
}

template <typename Src, typename Dst>
void launch_typed(const void* src, void* dst, size_t n, cudaStream_t stream) {
  cast_kernel<Src, Dst><<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<const Src*>(src),
                                                                 static_cast<Dst*>(dst), n);
}

}  // namespace

void launch_cast(const void* src, ElemType src_type, void* dst, ElemType dst_type, size_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (src_type == dst_type) {
    AMPCTL_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, n * type_size(src_type), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (src_type == ElemType::i32) {
    dispatch_floating(dst_type, "cast destination", [&](auto dst_tag) {
      launch_typed<int32_t, typename decltype(dst_tag)::type>(src, dst, n, stream);
    });
  } else if (dst_type == ElemType::i32) {
    dispatch_floating(src_type, "cast source", [&](auto src_tag) {
      launch_typed<typename decltype(src_tag)::type, int32_t>(src, dst, n, stream);
    });
  } else {
    dispatch_floating(src_type, "cast source", [&](auto src_tag) {
      dispatch_floating(dst_type, "cast destination", [&](auto dst_tag) {
        launch_typed<typename decltype(src_tag)::type, typename decltype(dst_tag)::type>(src, dst,
                                                                                         n, stream);
      });
    });
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
