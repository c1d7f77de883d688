// Limits on what a configuration (and what it drives) may be, and the one way its file is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "ampctl/core/limits.h"

namespace ampctl::config {

// The most optimizer steps a run may take (core/limits.h).
inline constexpr int64_t kMaxSteps = ampctl::kMaxSteps;

// The most bytes a configuration file may hold.
inline constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// The text of a configuration file: a regular file of at most kMaxConfigBytes (a FIFO, a device
// or a directory is refused at once, without reading a byte). Throws ConfigError{config} naming
// the file: "FILE: cannot read the configuration file: WHY".
std::string read_config_text(const std::filesystem::path& file);

}  // namespace ampctl::config
