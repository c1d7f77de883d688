// Compiled only when the build has no CUDA backend (AMPCTL_CUDA=OFF or no nvcc found).
#include "ampctl/backend/backend.h"

namespace ampctl {

std::unique_ptr<Backend> make_cuda_backend(int index) {
  throw Error{
      ErrorKind::cuda,
      "device cuda:" + std::to_string(index) + " requested, but this build has no CUDA backend",
      "rebuild with -DAMPCTL_CUDA=ON (needs nvcc), or use device: cpu"};
}

bool cuda_compiled() {
  return false;
}
std::string cuda_architectures() {
  return "";
}
int cuda_device_count() {
  return 0;
}
std::optional<uint64_t> cuda_free_memory(int) {
  return std::nullopt;
}

}  // namespace ampctl
