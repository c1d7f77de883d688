// The process group (process_group.h) and, when MPI is compiled in, the MPI communicator for CPU
// tensors: the deterministic reduce-scatter / all-gather described in communicator.h.
#include "ampctl/dist/process_group.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/error.h"

#include "ampctl/backend/cuda_plugin.h"

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

#if AMPCTL_HAVE_MPI

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    default:
      return MPI_UINT16_T;  // f16, bf16: copied, never reduced
  }
}

int checked_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": " + std::to_string(n) +
                                                 " elements exceed MPI's int counts (2^31 - 1)"};
  }
  return static_cast<int>(n);
}

// CPU tensors over MPI_COMM_WORLD. Every buffer the collectives need is allocated here, so a step
// allocates nothing.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Backend& backend, size_t bucket_bytes) : m_backend(&backend) {
    const auto w = static_cast<size_t>(g_world);
    // A bucket is bucket_bytes of f32 gradients over all ranks: each rank owns 1/N of it.
    m_chunk = std::max<size_t>(1, bucket_bytes / sizeof(float) / w);
    m_scratch.resize(w * m_chunk);
    m_scounts.resize(w);
    m_sdispls.resize(w);
    m_rcounts.resize(w);
    m_rdispls.resize(w);
  }

  int rank() const override { return g_rank; }
  int world_size() const override { return g_world; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    if (op == ReduceOp::max || t.dtype() != DType::f32) {
      exact_all_reduce(t, op);
      return;
    }
    reduce_scatter(t, op);
    all_gather_shards(t);
  }

  void broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    check_root(root, "broadcast");
    MPI_Bcast(t.data(), checked_count(t.numel(), "broadcast"), mpi_type(t.dtype()), root,
              MPI_COMM_WORLD);
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check(in, "all_gather input");
    check(out, "all_gather output");
    if (out.dtype() != in.dtype() || out.numel() != in.numel() * static_cast<size_t>(g_world)) {
      throw Error{ErrorKind::invalid_argument,
                  "all_gather: output " + out.describe() + " must hold world_size (" +
                      std::to_string(g_world) + ") x " + std::to_string(in.numel()) +
                      " elements of " + dtype_name(in.dtype())};
    }
    const int n = checked_count(in.numel(), "all_gather");
    checked_count(out.numel(), "all_gather");
    MPI_Allgather(in.data(), n, mpi_type(in.dtype()), out.data(), n, mpi_type(in.dtype()),
                  MPI_COMM_WORLD);
  }

  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  void reduce_scatter(const Tensor& t, ReduceOp op) override {
    check(t, "reduce_scatter");
    if (op == ReduceOp::max) {
      exact_all_reduce(t, op);  // max is exact in any order: the whole buffer at once
      return;
    }
    if (t.dtype() != DType::f32) {
      throw Error{ErrorKind::invalid_argument,
                  "reduce_scatter: sums are taken in f32, got " + t.describe()};
    }
    const size_t n = t.numel();
    checked_count(n, "reduce_scatter");
    auto* p = t.data_as<float>();
    const Range mine = own_shard(n);
    const size_t longest = shard_range(n, 0, g_world).size();
    const auto w = static_cast<size_t>(g_world);
    // Bucket k: elements [k, k + chunk) of every rank's shard. Each rank receives its shard's
    // piece from every rank (one all-to-all), then adds them in rank order.
    for (size_t k = 0; k < longest; k += m_chunk) {
      for (size_t q = 0; q < w; ++q) {
        const Range r = shard_range(n, static_cast<int>(q), g_world);
        const size_t count = k < r.size() ? std::min(m_chunk, r.size() - k) : 0;
        m_scounts[q] = static_cast<int>(count);
        m_sdispls[q] = count > 0 ? static_cast<int>(r.begin + k) : 0;
      }
      const int mine_count = m_scounts[static_cast<size_t>(g_rank)];
      for (size_t q = 0; q < w; ++q) {
        m_rcounts[q] = mine_count;
        m_rdispls[q] = static_cast<int>(q * m_chunk);
      }
      MPI_Alltoallv(p, m_scounts.data(), m_sdispls.data(), MPI_FLOAT, m_scratch.data(),
                    m_rcounts.data(), m_rdispls.data(), MPI_FLOAT, MPI_COMM_WORLD);
      float* dst = p + mine.begin + k;
      const auto count = static_cast<size_t>(mine_count);
      const auto ranks = static_cast<float>(g_world);
      for (size_t i = 0; i < count; ++i) {
        float acc = m_scratch[i];
        for (size_t q = 1; q < w; ++q) acc += m_scratch[q * m_chunk + i];
        dst[i] = op == ReduceOp::mean ? acc / ranks : acc;
      }
    }
  }

  void all_gather_shards(const Tensor& t) override {
    check(t, "all_gather_shards");
    const size_t n = t.numel();
    checked_count(n, "all_gather_shards");
    for (size_t q = 0; q < static_cast<size_t>(g_world); ++q) {
      const Range r = shard_range(n, static_cast<int>(q), g_world);
      m_rcounts[q] = static_cast<int>(r.size());
      m_rdispls[q] = static_cast<int>(r.begin);
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.data(), m_rcounts.data(), m_rdispls.data(),
                   mpi_type(t.dtype()), MPI_COMM_WORLD);
  }

  int64_t all_reduce_host(int64_t value, ReduceOp op) override {
    int64_t out = 0;
    MPI_Allreduce(&value, &out, 1, MPI_INT64_T, op == ReduceOp::max ? MPI_MAX : MPI_SUM,
                  MPI_COMM_WORLD);
    return op == ReduceOp::mean ? out / g_world : out;
  }

 private:
  void check(const Tensor& t, const char* what) const {
    check_tensor(t, m_backend->device(), what);
  }
  void check_root(int root, const char* what) const {
    if (root < 0 || root >= g_world) {
      throw Error{ErrorKind::invalid_argument, std::string(what) + ": root " +
                                                   std::to_string(root) + " outside [0, " +
                                                   std::to_string(g_world) + ")"};
    }
  }
  // Max (any dtype) or an integer sum: exact, so MPI's order does not matter.
  void exact_all_reduce(const Tensor& t, ReduceOp op) {
    if (op != ReduceOp::max && t.dtype() != DType::i32) {
      throw Error{ErrorKind::invalid_argument, std::string("all_reduce: ") + to_string(op) +
                                                   " of " + t.describe() +
                                                   " (sums and means are taken in f32 or i32)"};
    }
    if (t.dtype() != DType::f32 && t.dtype() != DType::i32) {
      throw Error{ErrorKind::invalid_argument,
                  "all_reduce: max of " + t.describe() + " (f32 or i32 only)"};
    }
    MPI_Allreduce(MPI_IN_PLACE, t.data(), checked_count(t.numel(), "all_reduce"),
                  mpi_type(t.dtype()), op == ReduceOp::max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    if (op == ReduceOp::mean) {
      auto* p = t.data_as<int32_t>();
      for (size_t i = 0; i < t.numel(); ++i) p[i] /= g_world;
    }
  }

  Backend* m_backend;
  size_t m_chunk = 1;  // elements of one rank's shard per bucket
  std::vector<float> m_scratch;
  std::vector<int> m_scounts, m_sdispls, m_rcounts, m_rdispls;
};

#endif  // AMPCTL_HAVE_MPI

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
  MPI_Bcast(text.data(), checked_count(text.size(), "broadcast"), MPI_CHAR, 0, MPI_COMM_WORLD);
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
  return std::make_unique<MpiCommunicator>(backend, options.bucket_bytes);
#else
  throw Error{ErrorKind::config, "several ranks, but this build of ampctl has no MPI"};
#endif
}

}  // namespace ampctl::dist
