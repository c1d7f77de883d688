// The MPI communicator (mpi_communicator.h): CPU tensors over MPI_COMM_WORLD, the deterministic
// reduce-scatter / all-gather described in communicator.h. Compiled to nothing without MPI.
#include "mpi_communicator.h"

#if AMPCTL_HAVE_MPI

#include <algorithm>
#include <climits>
#include <new>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/error.h"

// The C API only (Open MPI's and MPICH's mpi.h otherwise pull in the removed C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

namespace ampctl::dist {

int mpi_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": " + std::to_string(n) +
                                                 " elements exceed MPI's int counts (2^31 - 1)"};
  }
  return static_cast<int>(n);
}

namespace {

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

// CPU tensors over MPI_COMM_WORLD. Every buffer the collectives need is allocated here, so a step
// allocates nothing.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Backend& backend, int rank, int world, size_t bucket_bytes)
      : m_backend(&backend), m_rank(rank), m_world(world) {
    const auto w = static_cast<size_t>(m_world);
    // A bucket is bucket_bytes of f32 gradients over all ranks: each rank owns 1/N of it.
    m_chunk = std::max<size_t>(1, bucket_bytes / sizeof(float) / w);
    try {
      m_scratch.resize(w * m_chunk);
    } catch (const std::bad_alloc&) {
      throw Error{ErrorKind::runtime,
                  "out of memory: cannot allocate the all-reduce bucket (" +
                      std::to_string(w * m_chunk * sizeof(float)) +
                      " bytes, distributed.bucket_mb)",
                  "make distributed.bucket_mb smaller, or free memory / raise the process's "
                  "limit (ulimit -v)"};
    }
    m_scounts.resize(w);
    m_sdispls.resize(w);
    m_rcounts.resize(w);
    m_rdispls.resize(w);
  }

  int rank() const override { return m_rank; }
  int world_size() const override { return m_world; }

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
    MPI_Bcast(t.data(), mpi_count(t.numel(), "broadcast"), mpi_type(t.dtype()), root,
              MPI_COMM_WORLD);
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
    const int n = mpi_count(in.numel(), "all_gather");
    mpi_count(out.numel(), "all_gather");
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
    mpi_count(n, "reduce_scatter");
    auto* p = t.data_as<float>();
    const Range mine = own_shard(n);
    const size_t longest = shard_range(n, 0, m_world).size();
    const auto w = static_cast<size_t>(m_world);
    // Bucket k: elements [k, k + chunk) of every rank's shard. Each rank receives its shard's
    // piece from every rank (one all-to-all), then adds them in rank order.
    for (size_t k = 0; k < longest; k += m_chunk) {
      for (size_t q = 0; q < w; ++q) {
        const Range r = shard_range(n, static_cast<int>(q), m_world);
        const size_t count = k < r.size() ? std::min(m_chunk, r.size() - k) : 0;
        m_scounts[q] = static_cast<int>(count);
        m_sdispls[q] = count > 0 ? static_cast<int>(r.begin + k) : 0;
      }
      const int mine_count = m_scounts[static_cast<size_t>(m_rank)];
      for (size_t q = 0; q < w; ++q) {
        m_rcounts[q] = mine_count;
        m_rdispls[q] = static_cast<int>(q * m_chunk);
      }
      MPI_Alltoallv(p, m_scounts.data(), m_sdispls.data(), MPI_FLOAT, m_scratch.data(),
                    m_rcounts.data(), m_rdispls.data(), MPI_FLOAT, MPI_COMM_WORLD);
      float* dst = p + mine.begin + k;
      const auto count = static_cast<size_t>(mine_count);
      const auto ranks = static_cast<float>(m_world);
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
    mpi_count(n, "all_gather_shards");
    for (size_t q = 0; q < static_cast<size_t>(m_world); ++q) {
      const Range r = shard_range(n, static_cast<int>(q), m_world);
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
    MPI_Allreduce(MPI_IN_PLACE, t.data(), mpi_count(t.numel(), "all_reduce"), mpi_type(t.dtype()),
                  op == ReduceOp::max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    if (op == ReduceOp::mean) {
      auto* p = t.data_as<int32_t>();
      for (size_t i = 0; i < t.numel(); ++i) p[i] /= m_world;
    }
  }

  Backend* m_backend;
  int m_rank = 0;
  int m_world = 1;
  size_t m_chunk = 1;  // elements of one rank's shard per bucket
  std::vector<float> m_scratch;
  std::vector<int> m_scounts, m_sdispls, m_rcounts, m_rdispls;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend, int rank, int world,
                                                    size_t bucket_bytes) {
  return std::make_unique<MpiCommunicator>(backend, rank, world, bucket_bytes);
}

}  // namespace ampctl::dist

#endif  // AMPCTL_HAVE_MPI
