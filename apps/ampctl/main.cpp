// ampctl's entry point: parses the command line and maps every ampctl::Error to the exit codes of
// docs/reference.md. This is the only place that catches errors and prints them.
#include <cblas.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/build_info.h"
#include "ampctl/config/environment.h"
#include "ampctl/core/convert.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/error.h"
#include "ampctl/dist/process_group.h"
#include "ampctl/train/agreement.h"
#include "ampctl/train/signals.h"
#include "commands.h"
#include "console.h"

namespace ampctl::app {
namespace {
bool g_exit_agreed = false;
}
void mark_exit_agreed() {
  g_exit_agreed = true;
}
bool exit_is_agreed() {
  return g_exit_agreed;
}
void root_decides(const std::function<void()>& check) {
  int status = 0;
  std::exception_ptr failure;
  if (dist::process_rank() == 0) {
    try {
      check();
    } catch (const Error& e) {
      status = e.exit_code();
      failure = std::current_exception();
    }
  }
  dist::broadcast_from_root(status);
  if (failure) {
    mark_exit_agreed();
    std::rethrow_exception(failure);
  }
  if (status != 0) {
    mark_exit_agreed();
    throw SilentExit{status};
  }
}
int interrupted_exit(const Error& e) {
  if (const auto* d = dynamic_cast<const train::RanksDisagree*>(&e)) {
    // Every rank found the difference at once (agreement.h): each exits 2, the differing rank
    // says why.
    mark_exit_agreed();
    if (d->reporter()) throw;
    throw SilentExit{d->exit_code()};
  }
  if (e.kind() != ErrorKind::interrupted) throw;
  // Every rank stopped at the same step (the loop agrees on stops): rank 0 says so.
  mark_exit_agreed();
  if (dist::process_rank() == 0) {
    std::fprintf(stderr, "%s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
  }
  const int signo = train::stop_signal_or_agreed();
  return signo != 0 ? train::stop_exit_code(signo) : e.exit_code();
}
}  // namespace ampctl::app

namespace {

// "75,80,90" -> "sm_75, sm_80, sm_90" (prefix "sm_"), as the build recorded it.
std::string arch_list(const std::string& record, const std::string& prefix) {
  std::string out;
  for (size_t start = 0; start < record.size();) {
    const size_t end = std::min(record.find(',', start), record.size());
    out += (out.empty() ? "" : ", ") + prefix + record.substr(start, end - start);
    start = end + 1;
  }
  return out;
}

std::string version_text() {
  std::string backends = "cpu";
  if (ampctl::cuda_compiled()) {
    // The build's record (CMAKE_CUDA_ARCHITECTURES): what the kernels carry, read without
    // loading CUDA. docs/design.md, "Supported GPUs", says which GPU runs which.
    const std::string ptx = AMPCTL_CUDA_PTX;
    backends += ", cuda (" + arch_list(AMPCTL_CUDA_SASS, "sm_") +
                (ptx.empty() ? "" : "; PTX " + arch_list(ptx, "compute_")) + ")";
  }
  std::string text = "ampctl " AMPCTL_VERSION "\n";
  text += "build: " AMPCTL_BUILD_TYPE "\n";
  text += "backends: " + backends + "\n";
  text += "cpu path: " + ampctl::cpu_isa_description() + "\n";
  text += "cpu blas: OpenBLAS, " + ampctl::cpu_blas_kernels() + " kernels\n";
  text += std::string("cpu conversions: ") + ampctl::convert_fast_path_name() + "\n";
  const std::string mpi = ampctl::dist::mpi_library_version();
  text += "distributed: mpi " +
          (ampctl::dist::mpi_compiled() ? "yes" + (mpi.empty() ? "" : " (" + mpi + ")")
                                        : std::string("no")) +
          ", nccl " + (ampctl::dist::nccl_compiled() ? "yes" : "no") + "\n";
  return text;
}

// A message may list several problems, one per line (a configuration's), each followed by its
// own "hint: ..." line: every other line becomes one "error: ..." line.
int print_error(const ampctl::Error& e) {
  // With several ranks, a rank's own failure names the rank (an agreed one, such as a
  // configuration error, is printed by rank 0 alone and needs no name).
  const int world = ampctl::dist::process_world_size();
  const std::string who = world > 1 && !ampctl::app::exit_is_agreed()
                              ? "rank " + std::to_string(ampctl::dist::process_rank()) + " of " +
                                    std::to_string(world) + ": "
                              : "";
  const std::string message = who + e.what();
  for (size_t start = 0; start == 0 || start < message.size();) {
    const size_t end = std::min(message.find('\n', start), message.size());
    const std::string line = message.substr(start, end - start);
    std::fprintf(stderr, line.rfind("hint: ", 0) == 0 ? "%s\n" : "error: %s\n", line.c_str());
    start = end + 1;
  }
  if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
  return e.exit_code();
}

int run_command(int argc, char** argv);

// An option given an empty value (`--out ''`, an unset shell variable) is refused rather than
// taken for the option left out: the command would otherwise write, read or pick something the
// user did not name. --prompt is the one option whose empty value means something (no prompt).
void refuse_empty_values(const CLI::App& sub) {
  for (const CLI::Option* opt : sub.get_options()) {
    if (opt->count() == 0 || opt->get_type_size_max() == 0) continue;  // absent, or a flag
    if (opt->get_name() == "--prompt") continue;
    for (const std::string& value : opt->results()) {
      if (!value.empty()) continue;
      throw ampctl::Error{ampctl::ErrorKind::usage, opt->get_name() + ": an empty value ('')",
                          "give it a value: an empty one is not taken for the option left out"};
    }
  }
}

// A rank that fails on its own ends the whole job (the others may be waiting for it in a
// collective); an agreed outcome (every rank reached it) ends each rank normally.
int finish(int code) {
  if (code != 0 && ampctl::dist::process_world_size() > 1 && !ampctl::app::exit_is_agreed()) {
    ampctl::dist::abort_job(code);
  }
  ampctl::dist::finalize_process_group();
  return code;
}

}  // namespace

namespace {

// Whether stdout is a pipe whose reading end is closed (an earlier write failed with EPIPE, and
// errno no longer says so): poll reports POLLERR on such a pipe.
bool stdout_reader_gone() {
  struct stat st {};
  if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) return false;
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

}  // namespace

// Every command's output reaches its destination or the command fails: text still buffered
// for stdout is written now, and a write that failed (a full disk, /dev/full) turns an exit 0
// into exit 1 with the reason (a failed command keeps its own code); a closed pipe is no failure.
int check_stdout(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return code;
  // A reader that stopped reading (`ampctl validate ... | head`) wanted no more: that is not a
  // failure to report (SIGPIPE is ignored, so the write returned EPIPE instead of ending us).
  if (err == EPIPE || stdout_reader_gone()) return code;
  std::fprintf(stderr, "error: cannot write the standard output: %s\n",
               err != 0 ? std::strerror(err) : "a write failed");
  return code != 0 ? code : 1;
}

namespace {

// OpenBLAS starts its worker threads when it is loaded, before main (OPENBLAS_NUM_THREADS of them,
// else one per core), and each maps a 128 MiB buffer at once. Under an address-space limit
// (ulimit -v, ulimit -d) too small for them, OpenBLAS 0.3.21 retries the mapping forever: a worker
// spins on a core for the whole command and the process hangs at exit joining it. So under such a
// limit ampctl runs itself once more, with OPENBLAS_NUM_THREADS=1 for the load alone (no worker);
// the CPU backend starts OpenBLAS's threads itself once it has checked that they fit
// (make_cpu_backend), and every other command never starts them. The user's OPENBLAS_NUM_THREADS
// travels in kSavedThreads and is put back first thing, so the run's thread count is the same.
constexpr const char* kSavedThreads = "AMPCTL_INTERNAL_OPENBLAS_NUM_THREADS";
constexpr const char* kUnset = "\x01";

bool address_space_limited() {
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit limit {};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) return true;
  }
  return false;
}

void load_openblas_without_workers(char** argv) {
  if (const char* saved = std::getenv(kSavedThreads)) {
    // The second start: the user's environment as it was.
    if (std::strcmp(saved, kUnset) == 0) {
      ::unsetenv("OPENBLAS_NUM_THREADS");
    } else {
      ::setenv("OPENBLAS_NUM_THREADS", saved, 1);
    }
    ::unsetenv(kSavedThreads);
    return;
  }
  if (!address_space_limited() || openblas_get_num_threads() <= 1) return;
  const char* user = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string saved = user != nullptr ? user : kUnset;
  ::setenv(kSavedThreads, saved.c_str(), 1);
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::execv("/proc/self/exe", argv);
  // No /proc, or the exec failed: go on as loaded (the backend's check still holds new threads).
  ::unsetenv(kSavedThreads);
  if (user != nullptr) {
    ::setenv("OPENBLAS_NUM_THREADS", saved.c_str(), 1);
  } else {
    ::unsetenv("OPENBLAS_NUM_THREADS");
  }
}

}  // namespace

int main(int argc, char** argv) {
  load_openblas_without_workers(argv);
  try {
    ampctl::dist::init_process_group(&argc, &argv);
  } catch (const ampctl::Error& e) {
    return check_stdout(print_error(e));
  }
  return finish(check_stdout(run_command(argc, argv)));
}

namespace {

int run_command(int argc, char** argv) {
  // A closed pipe (`ampctl train ... | head`) or a file-size limit must surface as a write error
  // the code reports, not as a signal that kills the run mid-checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  ampctl::app::apply_console({});  // plain lines, no timestamps (train and resume take flags)
  CLI::App app{"ampctl: fp16 mixed-precision training with dynamic loss scaling"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(0, 1);
  ampctl::app::Commands commands;
  ampctl::app::register_train(app, commands);
  ampctl::app::register_resume(app, commands);
  ampctl::app::register_sweep(app, commands);
  ampctl::app::register_report(app, commands);
  ampctl::app::register_replay(app, commands);
  ampctl::app::register_validate(app, commands);
  ampctl::app::register_inspect(app, commands);
  ampctl::app::register_export(app, commands);
  ampctl::app::register_sample(app, commands);
  ampctl::app::register_eval(app, commands);
  ampctl::app::register_tokenize(app, commands);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      ampctl::config::check_environment();  // the path it prints is the one a command would run
      std::fputs(version_text().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      const std::string hint = ampctl::app::usage_hint(app, {argv + 1, argv + argc});
      throw ampctl::Error{ampctl::ErrorKind::usage, e.what(),
                          hint.empty() ? "run 'ampctl --help' for usage" : hint};
    }
    for (const ampctl::app::Command& command : commands) {
      if (!command.subcommand->parsed()) continue;
      refuse_empty_values(*command.subcommand);
      ampctl::config::check_environment();  // a misspelt path choice is refused, not ignored
      return command.run();
    }
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const ampctl::app::SilentExit& e) {
    return e.code;  // rank 0 printed why
  } catch (const ampctl::Error& e) {
    return print_error(e);
  } catch (const std::bad_alloc&) {
    // An allocation the memory plan did not foresee (the large ones are checked before they are
    // made, and name what they hold when they fail).
    std::fprintf(stderr,
                 "error: out of memory (an allocation failed in 'ampctl %s')\n"
                 "hint: free memory or raise the process's memory limit (ulimit -v)\n",
                 argc > 1 ? argv[1] : "");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}

}  // namespace
