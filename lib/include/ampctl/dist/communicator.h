// Communicator: the collectives a multi-process run needs, on backend tensors and on the
// backend's stream (so a GPU step stays free of host syncs), and the process's place in the
// group (rank, world size). The training step's gradient sync calls all_reduce; the places that
// must happen once per run (files, console, checkpoints) ask rank() == 0.
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

enum class ReduceOp { sum, max };
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
};

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

 private:
  void check(const Tensor& t, const char* what) const;
  Backend* m_backend;
};

}  // namespace ampctl::dist
