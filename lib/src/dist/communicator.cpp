#include "ampctl/dist/communicator.h"

#include <algorithm>
#include <string>

#include "ampctl/backend/backend.h"

namespace ampctl::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

Communicator::Range Communicator::shard_range(size_t n, int rank, int world) {
  const auto w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  const size_t base = n / w, extra = n % w;
  Range out;
  out.begin = r * base + std::min(r, extra);
  out.end = out.begin + base + (r < extra ? 1 : 0);
  return out;
}

void check_tensor(const Tensor& t, const Device& device, const char* what) {
  if (!t.defined()) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": undefined tensor"};
  }
  if (t.device() != device) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": " + t.describe() + " is not on " + device.str()};
  }
}

void SingleProcess::check(const Tensor& t, const char* what) const {
  check_tensor(t, m_backend->device(), what);
}

void SingleProcess::all_reduce(const Tensor& t, ReduceOp op) {
  check(t, "all_reduce");
  if (op != ReduceOp::sum && op != ReduceOp::mean && op != ReduceOp::max) {
    throw Error{ErrorKind::invalid_argument, "all_reduce: unknown reduce op"};
  }
  // One rank: the reduction of a single contribution is that contribution.
}

void SingleProcess::broadcast(const Tensor& t, int root) {
  check(t, "broadcast");
  if (root != 0) {
    throw Error{ErrorKind::invalid_argument,
                "broadcast: root " + std::to_string(root) + " outside [0, 1)"};
  }
}

void SingleProcess::all_gather(const Tensor& in, const Tensor& out) {
  check(in, "all_gather input");
  check(out, "all_gather output");
  if (out.dtype() != in.dtype() || out.numel() != in.numel()) {
    throw Error{ErrorKind::invalid_argument,
                "all_gather: output " + out.describe() + " must hold world_size (1) x " +
                    std::to_string(in.numel()) + " elements of " + dtype_name(in.dtype())};
  }
  if (out.data() != in.data()) m_backend->copy(out, in);
}

void SingleProcess::barrier() {}

void SingleProcess::reduce_scatter(const Tensor& t, ReduceOp op) {
  all_reduce(t, op);  // the one shard is the whole buffer
}

void SingleProcess::all_gather_shards(const Tensor& t) {
  check(t, "all_gather_shards");
}

int64_t SingleProcess::all_reduce_host(int64_t value, ReduceOp) {
  return value;
}

}  // namespace ampctl::dist
