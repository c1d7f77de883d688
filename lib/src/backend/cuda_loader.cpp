// backend.h's CUDA entry points in the core: they load the CUDA plugin on first use
// (cuda_plugin.h) and forward to it. Nothing here links CUDA: the NVIDIA driver is asked for by
// name (dlopen of libcuda.so.1) before the plugin, whose libraries (cuBLAS, NCCL) cost a few
// hundred MB of mappings, is loaded.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/build_info.h"
#include "ampctl/core/error.h"

namespace ampctl {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCudaHint =
    "set device: cpu (or auto, which falls back to the CPU); docs/reference.md, \"GPUs\", says "
    "what a GPU run needs";

bool built_with_cuda() {
  return AMPCTL_CUDA_SASS[0] != '\0';
}

fs::path executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return fs::path(std::string(buf, static_cast<size_t>(n))).parent_path();
}

std::vector<fs::path> plugin_candidates() {
  std::vector<fs::path> out;
  const fs::path exe = executable_dir();
  if (!exe.empty()) {
    out.push_back(exe / kCudaPluginFile);
    out.push_back(exe / "lib" / kCudaPluginFile);  // a carried bundle (scripts/gpu-bundle.sh)
    out.push_back(exe / ".." / "lib" / kCudaPluginFile);
  }
  return out;
}

// The plugin's file, or (empty path) why there is none.
struct Found {
  fs::path path;
  std::string why_not;
};

Found find_plugin() {
  // Linked already (the CUDA tests and benchmarks link it): that one.
  if (void* linked = ::dlopen(kCudaPluginFile, RTLD_NOW | RTLD_NOLOAD)) {
    Dl_info info{};
    const auto entry = ::dlsym(linked, kCudaPluginEntry);
    if (entry != nullptr && ::dladdr(entry, &info) != 0 && info.dli_fname != nullptr) {
      return Found{info.dli_fname, {}};
    }
  }
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("AMPCTL_CUDA_PLUGIN"); env != nullptr && *env != '\0') {
    candidates.push_back(env);  // the only place looked when set
  } else {
    candidates = plugin_candidates();
  }
  std::string looked;
  for (const fs::path& path : candidates) {
    std::error_code ec;
    if (fs::exists(path, ec)) return Found{path, {}};
    looked += (looked.empty() ? "" : ", ") + path.lexically_normal().string();
  }
  return Found{{},
               std::string(kCudaPluginFile) + ", the CUDA plugin, was not found (looked for " +
                   (looked.empty() ? std::string("nothing") : looked) +
                   "); a build with nvcc makes it: cmake --build BUILD --target ampctl_cuda"};
}

const Found& plugin_file() {
  static const Found found = find_plugin();
  return found;
}

struct Loaded {
  const CudaPluginApi* api = nullptr;
  std::string why_not;
};

Loaded load_plugin() {
  const Found& found = plugin_file();
  if (found.path.empty()) return Loaded{nullptr, found.why_not};
  const fs::path& path = found.path;
  // RTLD_LOCAL: the plugin's CUDA symbols stay its own; it resolves the core's against this
  // program, which exports them (ampctl_link_core in CMakeLists.txt).
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return Loaded{nullptr, "the CUDA plugin " + path.string() +
                               " cannot be loaded: " + (err ? err : "dlopen failed")};
  }
  const auto entry =
      reinterpret_cast<const CudaPluginApi* (*)()>(::dlsym(handle, kCudaPluginEntry));
  const CudaPluginApi* api = entry ? entry() : nullptr;
  if (api == nullptr || api->abi != kCudaPluginAbi ||
      std::strcmp(api->version, AMPCTL_VERSION) != 0) {
    // The handle stays open: unloading code that may hold static state is unsafe.
    return Loaded{nullptr, "the CUDA plugin " + path.string() + " is not this build's (ampctl " +
                               AMPCTL_VERSION + ", plugin ABI " + std::to_string(kCudaPluginAbi) +
                               ")"};
  }
  return Loaded{api, {}};
}

// Whether the NVIDIA driver library is installed: without it no GPU can be used, and loading the
// plugin (cuBLAS, NCCL) would only cost time and memory. The handle is kept: the plugin's CUDA
// runtime opens the same library when a GPU is used.
bool driver_present() {
  static const bool present = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr;
  return present;
}

}  // namespace

const CudaPluginApi* cuda_plugin(std::string* why_not) {
  static const Loaded loaded =
      built_with_cuda() ? load_plugin()
                        : Loaded{nullptr,
                                 "this build has no CUDA backend (built with AMPCTL_CUDA=OFF or "
                                 "without nvcc)"};
  if (why_not != nullptr) *why_not = loaded.why_not;
  return loaded.api;
}

std::string cuda_unavailable_reason() {
  std::string why;
  if (!built_with_cuda()) {
    cuda_plugin(&why);
    return why;
  }
  if (const Found& found = plugin_file(); found.path.empty()) return found.why_not;
  if (!driver_present()) return "the NVIDIA driver (libcuda.so.1) is not installed";
  const CudaPluginApi* api = cuda_plugin(&why);
  if (api == nullptr) return why;
  if (api->device_count() == 0) return "CUDA finds no usable GPU (cudaGetDeviceCount)";
  return {};
}

std::unique_ptr<Backend> make_cuda_backend(int index) {
  const std::string name = "cuda:" + std::to_string(index);
  const CudaPluginApi* api = built_with_cuda() && driver_present() ? cuda_plugin() : nullptr;
  if (api == nullptr) {
    throw Error{ErrorKind::cuda, "device " + name + " requested, but " + cuda_unavailable_reason(),
                kCudaHint};
  }
  return api->make_backend(index);
}

bool cuda_compiled() {
  return built_with_cuda();
}

std::string cuda_architectures() {
  return AMPCTL_CUDA_SASS;
}

int cuda_device_count() {
  const CudaPluginApi* api = built_with_cuda() && driver_present() ? cuda_plugin() : nullptr;
  return api != nullptr ? api->device_count() : 0;
}

std::optional<uint64_t> cuda_free_memory(int index) {
  const CudaPluginApi* api = built_with_cuda() && driver_present() ? cuda_plugin() : nullptr;
  return api != nullptr ? api->free_memory(index) : std::nullopt;
}

std::optional<ComputeCapability> cuda_capability(int index) {
  const CudaPluginApi* api = built_with_cuda() && driver_present() ? cuda_plugin() : nullptr;
  return api != nullptr ? api->capability(index) : std::nullopt;
}

}  // namespace ampctl
