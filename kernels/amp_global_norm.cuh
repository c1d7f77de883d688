// Launchers of kernels/amp_global_norm.cu: the deterministic L2 norm over many tensors.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// The partial-sum buffer the caller owns: kNormBlocks doubles on the device, allocated once.
constexpr unsigned kNormBlocks = 512;
constexpr unsigned kNormThreads = 256;

// partials[b] := (accumulate ? partials[b] : 0) + block b's sum of squares over the pack. An
// empty pack with accumulate == false zeroes the partials.
void launch_global_norm_partials(const TensorPack& pack, double* partials, bool accumulate,
                                 cudaStream_t stream);

// out[0] := float(sqrt(sum of partials)), summed in a fixed tree order by one block.
void launch_global_norm_finalize(const double* partials, float* out, cudaStream_t stream);

}  // namespace ampctl::kernels
