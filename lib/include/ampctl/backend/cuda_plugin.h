// The CUDA plugin: libampctl_cuda.so holds the CUDA backend, kernels/ and the NCCL communicator,
// and is the only part of ampctl that links CUDA (cudart statically, cuBLAS, NCCL). The core and
// ampctl link none of it: the plugin is dlopen'ed the first time a run asks for a GPU (device:
// cuda, or auto on a machine whose NVIDIA driver is installed), so starting, validating,
// reporting and CPU training never load CUDA and work where it is not installed. The plugin
// carries no copy of the core: its references to it resolve against the program that loads it,
// which links the whole core and exports its symbols (ampctl_link_core in CMakeLists.txt).
//
// Which plugin, first found wins: the one linked into the program already (the CUDA tests link
// it); $AMPCTL_CUDA_PLUGIN (a file path; when set, the only place looked); beside the
// executable; in lib/ below it (scripts/gpu-bundle.sh's layout); in ../lib/ from it
// (`cmake --install`'s). The plugin and the program must be one build's: the table carries the
// ABI number and version, checked at load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/device_support.h"

namespace ampctl {

namespace dist {
class Communicator;
}

inline constexpr uint32_t kCudaPluginAbi = 1;
inline constexpr const char* kCudaPluginFile = "libampctl_cuda.so";
inline constexpr const char* kCudaPluginEntry = "ampctl_cuda_plugin_v1";

// What the plugin provides; every function behaves as backend.h's namesake.
struct CudaPluginApi {
  uint32_t abi;         // kCudaPluginAbi of the plugin's build
  const char* version;  // AMPCTL_VERSION of the plugin's build
  std::unique_ptr<Backend> (*make_backend)(int index);
  int (*device_count)();
  std::optional<uint64_t> (*free_memory)(int index);
  std::optional<ComputeCapability> (*capability)(int index);
  // dist/nccl_communicator.h's make_nccl_communicator; nullptr when built without NCCL.
  std::unique_ptr<dist::Communicator> (*make_nccl_communicator)(Backend& backend, int rank,
                                                                int world);
};

// The loaded plugin's table, loading it on the first call (thread-safe); nullptr when it cannot
// be loaded, with the reason in *why_not (e.g. "libampctl_cuda.so not found (looked in ...)" or
// dlopen's "libcublas.so.13: cannot open shared object file").
const CudaPluginApi* cuda_plugin(std::string* why_not = nullptr);

// The compute capability of GPU `index` as the hardware reports it (AMPCTL_FORCE_SM75 not
// applied: device_support.h's effective_capability does that), or nullopt when CUDA is not
// compiled in or the device cannot be asked (never throws).
std::optional<ComputeCapability> cuda_capability(int index);

// Empty when a GPU can be used; else why not, naming what is missing: this build has no CUDA,
// the NVIDIA driver (libcuda.so.1) is not installed, the plugin or one of its libraries is
// missing, or CUDA finds no GPU. Loads the plugin only when the driver is present.
std::string cuda_unavailable_reason();

}  // namespace ampctl

// The plugin's one exported entry point (kCudaPluginEntry).
extern "C" const ampctl::CudaPluginApi* ampctl_cuda_plugin_v1();
