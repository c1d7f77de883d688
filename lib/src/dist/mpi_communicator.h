// The MPI communicator (docs/distributed.md): the collectives of communicator.h on CPU tensors
// over MPI_COMM_WORLD, which must be initialised (init_process_group). Built only with MPI
// (AMPCTL_HAVE_MPI); process_group.cpp's make_communicator is its one caller.
#pragma once

#include <cstddef>
#include <memory>

#include "ampctl/dist/communicator.h"

namespace ampctl::dist {

#if AMPCTL_HAVE_MPI
// Rank `rank` of `world` on `backend` (a CPU backend); every buffer its collectives need is
// allocated here (bucket_bytes: distributed.bucket_bytes), so a step allocates nothing.
std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend, int rank, int world,
                                                    size_t bucket_bytes);

// `n` as MPI's int count. Throws Error{invalid_argument} "WHAT: N elements exceed MPI's int
// counts (2^31 - 1)" past INT_MAX.
int mpi_count(size_t n, const char* what);
#endif

}  // namespace ampctl::dist
