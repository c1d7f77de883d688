// The process's place in a data-parallel job (docs/distributed.md), and the communicator a run
// trains with.
//
// A job is launched by an MPI launcher (mpirun, or srun under Slurm), one process per rank.
// main() calls init_process_group() first: when the environment says a launcher started this
// process (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE) and MPI is compiled in, it calls
// MPI_Init_thread; otherwise it does nothing and the process is rank 0 of 1. A one-rank job is
// the single-process program (make_communicator gives dist::SingleProcess), bitwise.
//
// Everything here is a no-op, or the one-process answer, in a build without MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ampctl/dist/comm_backend.h"
#include "ampctl/dist/communicator.h"

namespace ampctl::dist {

bool mpi_compiled();
bool nccl_compiled();
// "Open MPI v4.1.4, ..." (MPI_Get_library_version) or "" without MPI.
std::string mpi_library_version();

// Initialises MPI when launched by an MPI launcher (see above). Throws Error{config} when a
// launcher started several ranks and this build has no MPI. Call once, before anything else.
void init_process_group(int* argc, char*** argv);
// MPI_Finalize when MPI was initialised (main's normal exit).
void finalize_process_group();
bool launched_by_mpi();  // MPI was initialised

int process_rank();        // 0 without MPI
int process_world_size();  // 1 without MPI
int process_local_rank();  // the rank among the ranks of this host: the GPU it uses

// Prints nothing; ends the whole job with `code` (MPI_Abort) when several ranks run, else
// std::exit. A rank that failed calls it after printing its error, so the others never wait in
// a collective for it.
[[noreturn]] void abort_job(int code);

// Host collectives for the command line (before any communicator exists): rank 0's value on
// every rank. Identity with one rank.
void broadcast_from_root(std::string& text);
void broadcast_from_root(int& value);

// distributed.*: what make_communicator builds with several ranks.
// CommBackend (its names: dist/comm_backend.h).
struct CommunicatorOptions {
  CommBackend backend = CommBackend::automatic;
  size_t bucket_bytes = size_t{25} << 20;
};

// The communicator of this process on `backend`: SingleProcess with one rank; with several, MPI
// for CPU tensors and NCCL for CUDA ones (automatic), or the one asked for. NCCL on a CUDA
// backend is also built for one rank when asked for by name (CommBackend::nccl; gpu-check's
// smoke step), where the build has it. Throws Error{config} when the asked-for one cannot serve
// the backend's device or is not compiled in.
std::unique_ptr<Communicator> make_communicator(Backend& backend,
                                                const CommunicatorOptions& options);

}  // namespace ampctl::dist
