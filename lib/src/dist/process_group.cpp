// The process group (process_group.h): MPI's start and end when MPI is compiled in, the rank,
// and make_communicator's choice among SingleProcess, the MPI communicator (mpi_communicator.h)
// and the NCCL one (nccl_communicator.h).
#include "ampctl/dist/process_group.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/error.h"

#include "ampctl/backend/cuda_plugin.h"
#include "mpi_communicator.h"

#if AMPCTL_HAVE_MPI
// The C API only (Open MPI's and MPICH's mpi.h otherwise pull in the removed C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace ampctl::dist {
namespace {

bool g_mpi = false;
int g_rank = 0, g_world = 1, g_local = 0;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// What a launcher says about this process: its world size, or 0 when none started it.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = env(name)) return std::max(1, std::atoi(v));
  }
  if (env("PMIX_RANK") != nullptr) return 1;  // PMIx without a size variable: ask MPI
  return 0;
}

}  // namespace

bool mpi_compiled() {
  return AMPCTL_HAVE_MPI != 0;
}

bool nccl_compiled() {
  return AMPCTL_HAVE_NCCL != 0;
}

std::string mpi_library_version() {
#if AMPCTL_HAVE_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  return s.substr(0, s.find_first_of(",\n"));
#else
  return {};
#endif
}

void init_process_group(int* argc, char*** argv) {
  const int world = launcher_world_size();
  if (world == 0) return;
#if AMPCTL_HAVE_MPI
  int provided = 0;
  // Only the main thread calls MPI (the CPU backend's worker threads never do).
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g_local);
  MPI_Comm_free(&local);
#else
  (void)argc;
  (void)argv;
  if (world > 1) {
    throw Error{ErrorKind::config,
                "started by an MPI launcher as one of " + std::to_string(world) +
                    " ranks, but this build of ampctl has no MPI",
                "rebuild with -DAMPCTL_MPI=ON (Debian: libopenmpi-dev), or run one process"};
  }
#endif
}

void finalize_process_group() {
#if AMPCTL_HAVE_MPI
  if (g_mpi) MPI_Finalize();
  g_mpi = false;
#endif
}

bool launched_by_mpi() {
  return g_mpi;
}
int process_rank() {
  return g_rank;
}
int process_world_size() {
  return g_world;
}
int process_local_rank() {
  return g_local;
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#if AMPCTL_HAVE_MPI
  if (g_mpi && g_world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void broadcast_from_root(std::string& text) {
#if AMPCTL_HAVE_MPI
  if (!g_mpi || g_world == 1) return;
  auto size = static_cast<int64_t>(text.size());
  MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  text.resize(static_cast<size_t>(size));
  MPI_Bcast(text.data(), mpi_count(text.size(), "broadcast"), MPI_CHAR, 0, MPI_COMM_WORLD);
#else
  (void)text;
#endif
}

void broadcast_from_root(int& value) {
#if AMPCTL_HAVE_MPI
  if (g_mpi && g_world > 1) MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
#else
  (void)value;
#endif
}

std::unique_ptr<Communicator> make_communicator(Backend& backend,
                                                const CommunicatorOptions& options) {
  const bool cuda = backend.device().type != DeviceType::cpu;
#if AMPCTL_HAVE_NCCL
  // NCCL on CUDA tensors. With one rank only when asked for by name (distributed.backend: nccl,
  // scripts/gpu-check.sh's smoke step): a plain one-rank run stays the single-process program.
  if (cuda && (options.backend == CommBackend::nccl ||
               (g_world > 1 && options.backend == CommBackend::automatic))) {
    // In the CUDA plugin, loaded already: the backend is CUDA's.
    const CudaPluginApi* plugin = cuda_plugin();
    if (plugin == nullptr || plugin->make_nccl_communicator == nullptr) {
      throw Error{ErrorKind::runtime, "the NCCL communicator is not in the loaded CUDA plugin"};
    }
    return plugin->make_nccl_communicator(backend, g_rank, g_world);
  }
#endif
  if (g_world == 1) return std::make_unique<SingleProcess>(backend);
  CommBackend kind = options.backend;
  if (kind == CommBackend::automatic) kind = cuda ? CommBackend::nccl : CommBackend::mpi;
  if (kind == CommBackend::nccl) {
    throw Error{ErrorKind::config,
                std::string("distributed.backend: nccl ") +
                    (cuda ? "is not available in this build (NCCL collectives on CUDA tensors)"
                          : "serves CUDA tensors, and this run is on the CPU"),
                cuda ? "train the ranks on the CPU (device: cpu) with distributed.backend: mpi"
                     : "set distributed.backend: mpi (or auto)"};
  }
  if (cuda) {
    throw Error{ErrorKind::config,
                "distributed.backend: mpi reduces CPU tensors, and this run is on " +
                    backend.device().str(),
                "set device: cpu, or distributed.backend: nccl"};
  }
#if AMPCTL_HAVE_MPI
  return make_mpi_communicator(backend, g_rank, g_world, options.bucket_bytes);
#else
  throw Error{ErrorKind::config, "several ranks, but this build of ampctl has no MPI"};
#endif
}

}  // namespace ampctl::dist
