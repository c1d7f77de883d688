// Communicator: the collectives a multi-process run needs, on backend tensors and on the
// backend's stream (so a GPU step stays free of host syncs), and the process's place in the
// group (rank, world size). The training step's gradient sync calls all_reduce; the places that
// must happen once per run (files, console, checkpoints) ask rank() == 0.
//
// Sharding (ZeRO-1 and the bucketed all-reduce): a flat buffer of n elements is split into
// world_size() contiguous shards, rank r owning shard_range(n, r, world_size()); the first
// n % world_size() shards are one element longer. reduce_scatter leaves the reduction of every
// rank's buffer in the caller's own shard; all_gather_shards copies each rank's shard to every
// rank. all_reduce is defined as the two in sequence, so a ZeRO-1 rank's shard of the reduced
// gradients is bitwise the ZeRO-0 gradients there.
//
// Determinism: a sum or mean over ranks is taken by the shard's owner, adding the ranks'
// contributions in rank order 0, 1, ..., N-1 in f32 (mean: then divided by N), and then copied
// to every rank; so every rank holds the same bits and repeat runs give the same bits.
// (MPI_Allreduce promises neither a summation order nor, across implementations, the same
// result on every rank.)
//
// SingleProcess is the one-process group: rank 0 of 1, where every collective is the identity
// (all_reduce and broadcast leave the tensor as it is, all_gather copies its input). It does no
// device work at all, so a one-process run is bitwise what it was before the seam existed. An
// MPI/NCCL implementation (data-parallel training) fills the same interface.
//
// Every call checks its arguments first (a defined tensor on the communicator's device; for
// all_gather an output of world_size() * numel elements of the input's dtype; a root in
// [0, world_size())) and throws Error{invalid_argument}; the checks allocate only on failure.
#pragma once

#include <functional>
#include <memory>

#include "ampctl/core/tensor.h"

namespace ampctl {
class Backend;
}

namespace ampctl::dist {

// mean: the sum divided by the number of ranks (the data-parallel gradient average).
enum class ReduceOp { sum, mean, max };
const char* to_string(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_root() const { return rank() == 0; }

  // t := op over every rank's t (in place).
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  // t := rank root's t on every rank.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // out[r * n, (r + 1) * n) := rank r's `in` (n = in.numel()), flat, on every rank.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // Returns when every rank has called it.
  virtual void barrier() = 0;

  // Shards (see above): t's own shard := op over every rank's shard of t (f32; the rest of t
  // is left as it was); every rank's shard of t := that rank's shard (any dtype).
  virtual void reduce_scatter(const Tensor& t, ReduceOp op) = 0;
  virtual void all_gather_shards(const Tensor& t) = 0;
  // A host value reduced over the ranks (the loop's stop agreement): no device work.
  virtual int64_t all_reduce_host(int64_t value, ReduceOp op) = 0;

  struct Range {
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
  };
  static Range shard_range(size_t n, int rank, int world);
  Range own_shard(size_t n) const { return shard_range(n, rank(), world_size()); }
};

// The arguments the collectives check (shared by the implementations): a defined tensor on
// `device`; Error{invalid_argument} naming `what` otherwise.
void check_tensor(const Tensor& t, const Device& device, const char* what);

// Makes the process group a run trains in, on the run's backend.
using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(Backend&)>;

class SingleProcess final : public Communicator {
 public:
  explicit SingleProcess(Backend& backend) : m_backend(&backend) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce(const Tensor& t, ReduceOp op) override;
  void broadcast(const Tensor& t, int root) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void barrier() override;
  void reduce_scatter(const Tensor& t, ReduceOp op) override;
  void all_gather_shards(const Tensor& t) override;
  int64_t all_reduce_host(int64_t value, ReduceOp op) override;

 private:
  void check(const Tensor& t, const char* what) const;
  Backend* m_backend;
};

}  // namespace ampctl::dist
