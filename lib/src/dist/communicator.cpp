#include "ampctl/dist/communicator.h"

#include <string>

#include "ampctl/backend/backend.h"

namespace ampctl::dist {

const char* to_string(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : "max";
}

void SingleProcess::check(const Tensor& t, const char* what) const {
  if (!t.defined()) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": undefined tensor"};
  }
  if (t.device() != m_backend->device()) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": " + t.describe() +
                                                 " is not on " + m_backend->device().str()};
  }
}

void SingleProcess::all_reduce(const Tensor& t, ReduceOp op) {
  check(t, "all_reduce");
  if (op != ReduceOp::sum && op != ReduceOp::max) {
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

}  // namespace ampctl::dist
