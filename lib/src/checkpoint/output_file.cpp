// Output paths a command may write (see output_file.h).
#include "ampctl/checkpoint/output_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/core/error.h"
#include "ampctl/run/layout.h"

namespace ampctl::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHint =
    "give a new file, or an existing regular file that is not one of the command's inputs or a "
    "run's own files, in an existing folder you can write";

Error refused(const std::string& flag, const fs::path& path, const std::string& why) {
  return Error{ErrorKind::usage, flag + " " + path.string() + ": " + why, kHint};
}

bool exists_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

const char* type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is not a regular file";
}

}  // namespace

fs::path checked_output_path(const fs::path& requested, const std::vector<fs::path>& inputs,
                             const std::string& flag) {
  if (requested.empty() || requested.filename().empty() || requested.filename() == "." ||
      requested.filename() == "..") {
    throw refused(flag, requested, "names a folder, not a file");
  }
  fs::path target = requested;
  struct stat st {};
  bool exists = false;
  if (::lstat(requested.c_str(), &st) == 0) {
    exists = true;
    if (S_ISLNK(st.st_mode)) {
      if (::stat(requested.c_str(), &st) != 0) {
        throw refused(flag, requested,
                      std::string("is a symbolic link to a missing or unreachable file (") +
                          std::strerror(errno) + ")");
      }
      std::error_code ec;
      target = fs::canonical(requested, ec);
      if (ec) throw refused(flag, requested, "cannot resolve its symbolic link: " + ec.message());
    }
    if (!S_ISREG(st.st_mode)) {
      throw refused(
          flag, requested,
          std::string(type_name(st.st_mode)) +
              (target != requested ? " (the target of its symbolic link, " + target.string() + ")"
                                   : std::string()) +
              ", not a file ampctl may replace");
    }
    for (const fs::path& input : inputs) {
      struct stat in {};
      if (::stat(input.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
        throw refused(flag, requested,
                      "is " + input.string() + ", which this command reads: it would be replaced");
      }
    }
  } else if (errno != ENOENT) {
    throw refused(flag, requested, std::strerror(errno));
  }

  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!exists) {
    struct stat pst {};
    if (::stat(parent.c_str(), &pst) != 0) {
      throw refused(flag, requested,
                    errno == ENOENT
                        ? "the folder " + parent.string() + " does not exist"
                        : "cannot use the folder " + parent.string() + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(pst.st_mode)) {
      throw refused(flag, requested, parent.string() + " is not a folder");
    }
  }
  std::error_code ec;
  const fs::path real_parent = fs::canonical(parent, ec);
  if (ec) throw refused(flag, requested, "cannot resolve " + parent.string() + ": " + ec.message());
  const std::string name = target.filename().string();
  if (run::is_run_directory(real_parent) && run::is_run_file_name(name)) {
    throw refused(flag, requested,
                  "is the run's own file " + (real_parent / name).string() + ", of the " +
                      (run::holds_sweep(real_parent) ? "sweep" : "run") + " in " +
                      real_parent.string() +
                      " (ampctl writes it; a command never replaces another's files)");
  }
  if (real_parent.filename() == "checkpoints" &&
      (run::is_run_directory(real_parent.parent_path()) ||
       exists_no_follow(real_parent / "latest"))) {
    throw refused(flag, requested,
                  "is inside the run's checkpoints folder " + real_parent.string() +
                      " (it holds only the run's own checkpoints)");
  }
  return target;
}

void write_output_file(const fs::path& path, std::string_view bytes, const std::string& flag) {
  try {
    write_file_atomic(path, bytes);
  } catch (const Error& e) {
    throw Error{ErrorKind::usage, flag + ": " + e.what(),
                "give " + flag +
                    " a file in an existing folder you can write, on a file system "
                    "with room for it"};
  }
}

}  // namespace ampctl::checkpoint
