// The NCCL communicator (docs/distributed.md, "NCCL"): the collectives of communicator.h on CUDA
// tensors, enqueued on the CUDA backend's own stream, so a GPU step still has no host sync and its
// collectives are ordered with its kernels. Built only where CMake found NCCL next to CUDA and
// MPI (AMPCTL_HAVE_NCCL; compiled into ampctl_cuda, beside the CUDA backend it takes the stream
// of); process_group.cpp's make_communicator is its one caller.
#pragma once

#include <cstddef>
#include <memory>

#include "ampctl/dist/communicator.h"

namespace ampctl::dist {

// Rank `rank` of `world` on `backend` (a CUDA backend: its device is this rank's GPU). Rank 0
// makes the NCCL unique id and, with several ranks, sends it to the others over MPI
// (MPI_COMM_WORLD, which must be initialised); every rank then joins the NCCL communicator.
// Throws Error{invalid_argument} for a backend that is not CUDA's, Error{runtime} naming the NCCL
// call and its error when NCCL fails.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, int rank, int world);

}  // namespace ampctl::dist
