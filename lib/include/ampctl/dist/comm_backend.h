// distributed.backend's closed choice and its YAML names: plain data with no other include, so
// the config reads the names from here (scripts/dev/check_deps.py, SHARED_HEADERS) and holds the
// value as it is (dist/process_group.h, make_communicator, says what each one builds).
#pragma once

#include <utility>

namespace ampctl::dist {

enum class CommBackend { automatic, nccl, mpi };

inline constexpr std::pair<CommBackend, const char*> kCommBackendNames[] = {
    {CommBackend::automatic, "auto"}, {CommBackend::nccl, "nccl"}, {CommBackend::mpi, "mpi"}};

}  // namespace ampctl::dist
