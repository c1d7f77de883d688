// The NCCL communicator (nccl_communicator.h; docs/distributed.md, "NCCL").
//
// Determinism. ncclAllReduce promises no summation order: NCCL picks ring or tree, and a
// protocol, by size and topology, and nothing guarantees that every rank ends with the same
// bits. The sums here are the CPU communicator's scheme (communicator.h): each shard of the flat
// buffer is reduced once, onto its owner (ncclReduce, rooted at the owner), and the owner's
// result is then broadcast to every rank (ncclBroadcast). Every element is therefore computed
// once, so every rank holds the same bits. That is what keeps the ranks' found_inf, skips and
// scales identical. The shards are shard_range's, one element longer on the first n % N ranks.
// ncclReduceScatter and ncclAllGather need equal counts per rank, which is why the uneven split
// is made of one rooted call per shard inside an ncclGroupStart / ncclGroupEnd. Max and integer
// sums are exact in any order, so they use ncclAllReduce.
//
// Every call is enqueued on the CUDA backend's stream, after the kernels that wrote its input and
// before those that read its output, with no host sync. all_reduce_host and barrier run on the
// host over MPI, like the CPU communicator's.
#include "nccl_communicator.h"

// The C API only (Open MPI's and MPICH's mpi.h otherwise pull in the removed C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include <string>

#include "../backend/cuda/cuda_backend.h"
#include "ampctl/core/error.h"

namespace ampctl::dist {
namespace {

[[noreturn]] void throw_nccl(ncclResult_t r, const char* expr) {
  throw Error{ErrorKind::runtime, std::string("NCCL: ") + expr + ": " + ncclGetErrorString(r) +
                                      (r == ncclSystemError || r == ncclRemoteError
                                           ? std::string(" (") + ncclGetLastError(nullptr) + ")"
                                           : std::string())};
}

#define AMPCTL_NCCL_CHECK(expr)                 \
  do {                                          \
    const ncclResult_t ampctl_nccl_r_ = (expr); \
    if (ampctl_nccl_r_ != ncclSuccess) {        \
      throw_nccl(ampctl_nccl_r_, #expr);        \
    }                                           \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
  }
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(cuda_detail::CudaBackend& backend, int rank, int world)
      : m_backend(&backend), m_stream(backend.native_stream()), m_rank(rank), m_world(world) {
    ncclUniqueId id;
    if (rank == 0) AMPCTL_NCCL_CHECK(ncclGetUniqueId(&id));
    if (world > 1) MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    const cuda_detail::DeviceScope scope(backend.device().index);
    AMPCTL_NCCL_CHECK(ncclCommInitRank(&m_comm, world, id, rank));
  }
  ~NcclCommunicator() override {
    if (m_comm != nullptr) (void)ncclCommDestroy(m_comm);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return m_rank; }
  int world_size() const override { return m_world; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    if (op == ReduceOp::max || t.dtype() == DType::i32) {
      exact_all_reduce(t, op);
      return;
    }
    reduce_scatter(t, op);
    all_gather_shards(t);
  }

  void broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    check_root(root, "broadcast");
    AMPCTL_NCCL_CHECK(
        ncclBroadcast(t.data(), t.data(), t.numel(), nccl_type(t.dtype()), root, m_comm, m_stream));
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check(in, "all_gather input");
    check(out, "all_gather output");
    if (out.dtype() != in.dtype() || out.numel() != in.numel() * static_cast<size_t>(m_world)) {
      throw Error{ErrorKind::invalid_argument,
                  "all_gather: output " + out.describe() + " must hold world_size (" +
                      std::to_string(m_world) + ") x " + std::to_string(in.numel()) +
                      " elements of " + dtype_name(in.dtype())};
    }
    AMPCTL_NCCL_CHECK(
        ncclAllGather(in.data(), out.data(), in.numel(), nccl_type(in.dtype()), m_comm, m_stream));
  }

  // One rank (NCCL named for a single process, which may not have initialised MPI): nothing to
  // wait for, as in all_reduce_host.
  void barrier() override {
    if (m_world > 1) MPI_Barrier(MPI_COMM_WORLD);
  }

  void reduce_scatter(const Tensor& t, ReduceOp op) override {
    check(t, "reduce_scatter");
    if (op == ReduceOp::max) {
      exact_all_reduce(t, op);
      return;
    }
    if (t.dtype() != DType::f32) {
      throw Error{ErrorKind::invalid_argument,
                  "reduce_scatter: sums are taken in f32, got " + t.describe()};
    }
    // Mean: NCCL's ncclAvg (the sum, then scaled by 1/N on the owner), once per element.
    const ncclRedOp_t nop = op == ReduceOp::mean ? ncclAvg : ncclSum;
    auto* p = t.data_as<float>();
    AMPCTL_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < m_world; ++q) {
      const Range r = shard_range(t.numel(), q, m_world);
      if (r.size() == 0) continue;
      AMPCTL_NCCL_CHECK(
          ncclReduce(p + r.begin, p + r.begin, r.size(), ncclFloat32, nop, q, m_comm, m_stream));
    }
    AMPCTL_NCCL_CHECK(ncclGroupEnd());
  }

  void all_gather_shards(const Tensor& t) override {
    check(t, "all_gather_shards");
    auto* p = static_cast<char*>(t.data());
    const size_t elem = dtype_size(t.dtype());
    AMPCTL_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < m_world; ++q) {
      const Range r = shard_range(t.numel(), q, m_world);
      if (r.size() == 0) continue;
      void* at = p + r.begin * elem;
      AMPCTL_NCCL_CHECK(ncclBroadcast(at, at, r.size(), nccl_type(t.dtype()), q, m_comm, m_stream));
    }
    AMPCTL_NCCL_CHECK(ncclGroupEnd());
  }

  int64_t all_reduce_host(int64_t value, ReduceOp op) override {
    if (m_world == 1) return value;
    int64_t out = 0;
    MPI_Allreduce(&value, &out, 1, MPI_INT64_T, op == ReduceOp::max ? MPI_MAX : MPI_SUM,
                  MPI_COMM_WORLD);
    return op == ReduceOp::mean ? out / m_world : out;
  }

 private:
  void check(const Tensor& t, const char* what) const {
    check_tensor(t, m_backend->device(), what);
  }
  void check_root(int root, const char* what) const {
    if (root < 0 || root >= m_world) {
      throw Error{ErrorKind::invalid_argument, std::string(what) + ": root " +
                                                   std::to_string(root) + " outside [0, " +
                                                   std::to_string(m_world) + ")"};
    }
  }
  // Max (f32 or i32) or an integer sum: exact in any order. (An integer mean, which the CPU
  // communicator truncates on the host, has no exact NCCL counterpart; no caller needs it.)
  void exact_all_reduce(const Tensor& t, ReduceOp op) {
    if (t.dtype() != DType::f32 && t.dtype() != DType::i32) {
      throw Error{ErrorKind::invalid_argument, std::string("all_reduce: ") + to_string(op) +
                                                   " of " + t.describe() + " (f32 or i32 only)"};
    }
    if (op == ReduceOp::mean || (op == ReduceOp::sum && t.dtype() != DType::i32)) {
      throw Error{ErrorKind::invalid_argument, std::string("all_reduce: ") + to_string(op) +
                                                   " of " + t.describe() +
                                                   " (exact reductions: max, or a sum of i32)"};
    }
    AMPCTL_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), t.numel(), nccl_type(t.dtype()),
                                    op == ReduceOp::max ? ncclMax : ncclSum, m_comm, m_stream));
  }

  cuda_detail::CudaBackend* m_backend;
  cudaStream_t m_stream;
  int m_rank, m_world;
  ncclComm_t m_comm = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, int rank, int world) {
  auto* cuda = dynamic_cast<cuda_detail::CudaBackend*>(&backend);
  if (cuda == nullptr) {
    throw Error{
        ErrorKind::invalid_argument,
        "the NCCL communicator serves CUDA tensors, and the backend is " + backend.description()};
  }
  return std::make_unique<NcclCommunicator>(*cuda, rank, world);
}

}  // namespace ampctl::dist
