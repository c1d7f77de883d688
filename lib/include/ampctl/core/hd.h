// AMPCTL_HD marks functions compiled for both host and device, so that the per-element math of
// every CUDA kernel is the same code the host tests (and the CPU backend) run.
#pragma once

#if defined(__CUDACC__)
#define AMPCTL_HD __host__ __device__ __forceinline__
#else
#define AMPCTL_HD inline
#endif
