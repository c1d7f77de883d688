// The local sweep executor (one `ampctl train` / `ampctl resume` process per run, at most `jobs`
// at once) and the sweep.csv / sweep.json report.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/core/run_lock.h"
#include "ampctl/run/layout.h"
#include "ampctl/run/numerics.h"
#include "ampctl/run/summary.h"
#include "ampctl/sweep/sweep.h"
#include "ampctl/sweep/verdict.h"

namespace ampctl::sweep {

namespace fs = std::filesystem;
namespace files = ampctl::run;  // the run directory's formats
namespace sk = ampctl::run::summary_key;

namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_checkpoint_request = 0;

extern "C" void ampctl_sweep_on_stop_signal(int signo) {
  g_stop_signal = signo;
}

// SIGUSR1: forwarded to the running runs, which write a checkpoint and go on.
extern "C" void ampctl_sweep_on_checkpoint_signal(int) {
  g_checkpoint_request = 1;
}

// The mark a sweep leaves in every run folder it creates. A folder without it is never deleted,
// trained or resumed by a sweep: it may be a user's own `base/`.
constexpr const char* kRunMark = ".ampctl-sweep-run";
constexpr const char* kRunMarkFormat = "ampctl-sweep-run";
// The resolved configuration the run's `ampctl train` reads (train writes config.yaml itself and
// never overwrites its input).
constexpr const char* kRunConfig = ".ampctl-sweep-config.yaml";

// FNV-1a, 64 bits, of the resolved configuration's text (config::to_yaml: every key, every
// default filled in, in schema order), so any change to the base file, an override or a default
// of a newer ampctl changes it. It detects edits, it is not a defence against forgery.
std::string config_hash(const std::string& resolved_yaml) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : resolved_yaml) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool exists_no_follow(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

// The config hash a run folder's mark records; "" when the mark is missing or not one. A mark
// that is not a regular file (a FIFO, a device) is Error{input} naming it: it is never opened.
std::string read_mark(const fs::path& dir, bool& present) {
  present = exists_no_follow(dir / kRunMark);
  if (!present) return {};
  const nlohmann::json j = nlohmann::json::parse(read_regular_file(dir / kRunMark, kMaxRecordBytes),
                                                 nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kRunMarkFormat || !j.contains("config_hash") ||
      !j["config_hash"].is_string())
    return {};
  return j["config_hash"].get<std::string>();
}

void write_mark(const fs::path& dir, const Run& run) {
  const nlohmann::json mark = {{"format", kRunMarkFormat},
                               {"version", 1},
                               {"run", run.name},
                               {"overrides", run.overrides},
                               {"config_hash", config_hash(run.resolved_yaml)}};
  checkpoint::write_file_atomic(dir / kRunMark, mark.dump(2) + "\n");
}

// Every run folder that exists must be one this sweep made for the same configuration: refuses
// (Error{usage}, before any run starts) a path that is not a folder, a folder without the mark,
// and a run trained with another configuration (stale), listing each.
void check_run_folders(const Sweep& sweep, const fs::path& out) {
  std::vector<std::string> unmarked, stale;
  for (const Run& run : sweep.runs) {
    const fs::path dir = out / run.name;
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    if (st.type() == fs::file_type::not_found) continue;
    if (st.type() != fs::file_type::directory) {
      unmarked.push_back(dir.string() + " exists and is not a folder");
      continue;
    }
    if (const std::string bad = run::non_regular_run_file(dir); !bad.empty()) {
      unmarked.push_back(bad + ", not a regular file");
      continue;
    }
    bool present = false;
    const std::string recorded = read_mark(dir, present);
    if (!present) {
      unmarked.push_back(dir.string() + " was not created by ampctl sweep (it has no " + kRunMark +
                         ")");
    } else if (recorded.empty()) {
      unmarked.push_back((dir / kRunMark).string() + " is not a sweep's mark");
    } else if (recorded != config_hash(run.resolved_yaml)) {
      stale.push_back(dir.string() + " is stale: it was trained with another configuration (" +
                      recorded + ", the sweep's is now " + config_hash(run.resolved_yaml) + ")");
    }
  }
  if (unmarked.empty() && stale.empty()) return;
  std::string message;
  for (const std::vector<std::string>* list : {&unmarked, &stale}) {
    for (const std::string& line : *list) message += (message.empty() ? "" : "\n") + line;
  }
  std::string hint;
  if (!unmarked.empty()) {
    hint = "a sweep writes only folders it created: move those away or give another --out";
  }
  if (!stale.empty()) {
    hint += std::string(hint.empty() ? "" : "; ") +
            "the base config, an override or a default changed since the stale runs were "
            "trained, so their results would not be this sweep's: give the edited sweep a new "
            "--out, or remove the stale run folders (their results are lost) to retrain them";
  }
  throw Error{ErrorKind::usage, message, hint};
}

// Removes what a run that died before its first checkpoint left (only the files a run writes;
// the folder is the sweep's, by its mark), so that `train` starts it over.
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : {"metrics.jsonl", "metrics.jsonl.tmp", "summary.json", "config.yaml"}) {
    fs::remove(dir / name, ec);
  }
  fs::remove_all(dir / "checkpoints", ec);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// A run's summary.json; null when it is missing, not a regular file, too large, unreadable or
// not JSON (the run's status is then unknown, never read from part of the file).
nlohmann::json read_json(const fs::path& file) {
  try {
    return nlohmann::json::parse(read_regular_file(file, kMaxRecordBytes));
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  } catch (const Error&) {
    return nullptr;
  }
}

// The last "error: ..." line of a log, else its last non-empty line ("" when the log cannot be
// read to its end).
std::string last_line(const fs::path& file) {
  std::string line, last, last_error;
  try {
    LineReader in(file, size_t{1} << 20);
    while (in.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      last = line;
      if (line.rfind("error: ", 0) == 0) last_error = line;
    }
  } catch (const Error&) {
    return {};
  }
  return last_error.empty() ? last : last_error;
}

bool has_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "checkpoints" / "latest", ec);
}

// Takes OUT/.<run>.lock for a run about to start and returns its descriptor. The spawned child
// inherits the descriptor, so the lock lives exactly as long as the run's process, even one left
// behind by a sweep that was killed: a re-run waits here for it to finish its checkpoint instead
// of writing the same directory at the same time. Returns -1 when a stop signal came while
// waiting.
int lock_run(const fs::path& out, const std::string& name, bool quiet) {
  const fs::path file = out / ("." + name + ".lock");
  const int fd = open(file.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    throw Error{ErrorKind::runtime, "cannot create " + file.string() + ": " + std::strerror(errno)};
  }
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
  if (!quiet) {
    std::printf("[sweep] %s: waiting for an earlier process of this run to stop\n", name.c_str());
    std::fflush(stdout);
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR || g_stop_signal != 0) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

// Starts one child: `exe ARGS...` with stdout/stderr into the run directory.
pid_t spawn(const fs::path& exe, const std::vector<std::string>& args, const fs::path& dir,
            int threads, int run_lock_fd) {
  const std::string out_log = (dir / "stdout.log").string();
  const std::string err_log = (dir / "stderr.log").string();
  const std::string exe_s = exe.string();
  const std::string threads_s = std::to_string(threads);
  const std::string lock_fd_s = std::to_string(run_lock_fd);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe_s.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error{ErrorKind::runtime, std::string("fork failed: ") + std::strerror(errno)};
  if (pid == 0) {
    // Own process group: a terminal's Ctrl-C reaches the sweep, which forwards it once.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    // An ignored SIGHUP (a sweep under nohup) stays ignored in the run, which then keeps it so.
    if (!signal_is_ignored(SIGHUP)) signal(SIGHUP, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    // The run's lock passes to the child on the same open file description (run_lock.h).
    fcntl(run_lock_fd, F_SETFD, 0);
    setenv(kRunLockFdVariable, lock_fd_s.c_str(), 1);
    // A sweep that dies without forwarding (SIGKILL, a crash) still stops its runs the clean way:
    // SIGTERM makes each write a checkpoint and exit, so a re-run resumes them.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) raise(SIGTERM);
    // O_NONBLOCK: a FIFO in the log's place fails the open instead of blocking the run.
    const int out = open(out_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK, 0644);
    const int err = open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0644);
    if (out >= 0) dup2(out, 1);
    if (err >= 0) dup2(err, 2);
    setenv("OPENBLAS_NUM_THREADS", threads_s.c_str(), 1);
    execv(exe_s.c_str(), argv.data());
    std::fprintf(stderr, "error: cannot run %s: %s\n", exe_s.c_str(), std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string json_number(const nlohmann::json& j) {
  return j.is_null() ? "" : j.dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

namespace {

// --out: not a run's folder nor inside its checkpoints/, and created (the command line's
// problem, exit 2, when it cannot be), once the run folders in it are checked.
void prepare_out(const Sweep& sweep, const fs::path& out) {
  // Not a run's folder: a sweep's files and run folders beside a run's, or in its checkpoints/.
  if (run::holds_run(out)) {
    throw Error{ErrorKind::usage, "--out " + out.string() + ": holds a run",
                "give the sweep a folder of its own with --out DIR"};
  }
  if (const std::string why = run::inside_checkpoints_folder(out); !why.empty()) {
    throw Error{ErrorKind::usage, "--out " + out.string() + ": " + why,
                "give the sweep a folder of its own with --out DIR"};
  }
  check_run_folders(sweep, out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    // An unusable output is the command line's problem (exit 2), named with the reason.
    throw Error{ErrorKind::usage, "--out " + out.string() + ": cannot create it: " + ec.message(),
                "give --out a folder you can create and write"};
  }
}

// The sweep's signal handlers while it runs: SIGINT, SIGTERM and SIGHUP stop it (forwarded to
// the runs), SIGUSR1 asks the runs for a checkpoint; restore() puts the previous ones back.
struct SweepSignals {
  struct sigaction old_int {
  }, old_term{}, old_hup{}, old_usr1{};
  bool hup_handled = false;

  void install() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = ampctl_sweep_on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    // A closed terminal or session: stop as for SIGTERM; unless the sweep was started with
    // SIGHUP ignored (`nohup ampctl sweep ...`), which it and its runs then keep ignoring.
    hup_handled = !signal_is_ignored(SIGHUP);
    if (hup_handled) sigaction(SIGHUP, &sa, &old_hup);
    struct sigaction usr1 {};
    usr1.sa_handler = ampctl_sweep_on_checkpoint_signal;
    sigemptyset(&usr1.sa_mask);
    g_checkpoint_request = 0;
    sigaction(SIGUSR1, &usr1, &old_usr1);
  }
  void restore() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    if (hup_handled) sigaction(SIGHUP, &old_hup, nullptr);
    sigaction(SIGUSR1, &old_usr1, nullptr);
  }
};

// A result per run, in the sweep's order; returns the indices of those still to run (a run
// that finished before keeps its own status, and is not run again).
std::vector<size_t> list_runs(const Sweep& sweep, const ExecOptions& options, ExecResult& result) {
  std::vector<size_t> pending;
  std::error_code ec;
  for (const Run& run : sweep.runs) {
    RunResult r;
    r.run = run;
    r.dir = options.out / run.name;
    // A run the sweep stops before starting has no folder: "not_started", no run_dir.
    r.status = "not_started";
    if (fs::exists(r.dir / files::kSummaryFile, ec)) {
      r.summary = read_json(r.dir / files::kSummaryFile);
      r.status = files::summary_status(r.summary);
      if (!options.quiet) {
        std::printf("[sweep] %s: finished before (%s), skipped\n", run.name.c_str(),
                    r.status.c_str());
      }
    } else {
      pending.push_back(result.results.size());
    }
    result.results.push_back(std::move(r));
  }
  return pending;
}

// Starts run r under the sweep's lock on it (`lock`, closed here in every case): its folder
// created and marked, its own lock claimed and handed to the child with `ampctl train` or
// `resume`. Returns the child, or nothing when the run is not started (its status says why).
std::optional<pid_t> start_run(RunResult& r, const ExecOptions& options, int threads, int lock) {
  std::error_code ec;
  // The run folder: created and marked by this sweep, or marked before (check_run_folders).
  if (!fs::exists(r.dir, ec)) {
    fs::create_directories(r.dir, ec);
    if (ec) {
      close(lock);
      throw Error{ErrorKind::runtime, "cannot create " + r.dir.string() + ": " + ec.message()};
    }
    write_mark(r.dir, r.run);
  }
  // The run's own lock, handed to the child: a `resume` of this run started by hand, or a
  // second sweep, cannot write the folder at the same time (nor this sweep while they do).
  std::optional<RunLock> run_lock;
  try {
    run_lock.emplace(r.dir);
  } catch (const Error& e) {
    close(lock);
    r.status = "failed";
    r.exit_code = e.exit_code();
    r.error = e.what();
    if (!options.quiet) std::printf("[sweep] %s: not started: %s\n", r.run.name.c_str(), e.what());
    return std::nullopt;
  }
  // Checked again under the locks, in one step with the claim: another sweep into the same
  // --out may have finished this run (or marked the folder for another configuration)
  // after this sweep looked, and starting it again would replace its results.
  bool present = false;
  std::string problem = run::non_regular_run_file(r.dir);
  if (problem.empty() && read_mark(r.dir, present) != config_hash(r.run.resolved_yaml)) {
    problem = (r.dir / kRunMark).string() +
              " is not this sweep's mark for the run (another sweep wrote it meanwhile)";
  }
  if (!problem.empty()) {
    close(lock);
    r.status = "failed";
    r.exit_code = 2;
    r.error = problem;
    if (!options.quiet)
      std::printf("[sweep] %s: not started: %s\n", r.run.name.c_str(), problem.c_str());
    return std::nullopt;
  }
  if (fs::exists(r.dir / files::kSummaryFile, ec)) {
    close(lock);
    r.summary = read_json(r.dir / files::kSummaryFile);
    r.status = files::summary_status(r.summary);
    if (!options.quiet) {
      std::printf("[sweep] %s: finished meanwhile by another process (%s), skipped\n",
                  r.run.name.c_str(), r.status.c_str());
    }
    return std::nullopt;
  }
  std::vector<std::string> args;
  if (has_checkpoint(r.dir)) {
    args = {"resume", "--checkpoint", r.dir.string()};
    if (!options.quiet) std::printf("[sweep] %s: resuming\n", r.run.name.c_str());
  } else {
    // Leftovers of a run that died before its first checkpoint: start over.
    remove_leftovers(r.dir);
    try {
      checkpoint::write_file_atomic(r.dir / kRunConfig, r.run.resolved_yaml);
    } catch (...) {
      close(lock);
      throw;
    }
    args = {"train", "--config", (r.dir / kRunConfig).string(), "--run-dir", r.dir.string()};
    if (!options.quiet) std::printf("[sweep] %s: starting\n", r.run.name.c_str());
  }
  std::fflush(stdout);
  r.trained = true;
  pid_t pid = -1;
  try {
    pid = spawn(options.exe, args, r.dir, threads, run_lock->fd());
  } catch (...) {
    close(lock);
    throw;
  }
  close(lock);                   // the child holds it now
  run_lock->release_to_child();  // and this one
  return pid;
}

// What a run's exit (waitpid's status) says: its summary's status, or interrupted, diverged or
// failed with the last line of its stderr.log.
void record_exit(RunResult& r, int status, bool quiet) {
  std::error_code ec;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.exit_code == 0 && fs::exists(r.dir / files::kSummaryFile, ec)) {
    r.summary = read_json(r.dir / files::kSummaryFile);
    r.status = files::summary_status(r.summary);
    if (!quiet) std::printf("[sweep] %s: %s\n", r.run.name.c_str(), r.status.c_str());
    return;
  }
  std::string err = last_line(r.dir / "stderr.log");
  if (err.rfind("error: ", 0) == 0) err = err.substr(7);
  r.error = err;
  if (r.exit_code == 129 || r.exit_code == 130 || r.exit_code == 143) {
    r.status = "interrupted";
  } else {
    // A run that stopped because training diverged says so in its summary (exit 1).
    r.summary = read_json(r.dir / files::kSummaryFile);
    r.status = r.summary.is_object() && files::summary_status(r.summary) == files::kStatusDiverged
                   ? "diverged"
                   : "failed";
  }
  if (!quiet)
    std::printf("[sweep] %s: %s (exit %d): %s\n", r.run.name.c_str(), r.status.c_str(), r.exit_code,
                err.c_str());
}

}  // namespace

ExecResult execute(const Sweep& sweep, const ExecOptions& options) {
  ExecResult result;
  const int jobs = std::max(1, options.jobs);
  const int threads = std::max(1, usable_cores() / jobs);
  prepare_out(sweep, options.out);
  SweepSignals signals;
  signals.install();
  const std::vector<size_t> pending = list_runs(sweep, options, result);

  std::map<pid_t, size_t> running;
  size_t next = 0;
  bool forwarded = false;
  // Progress: "k/N done" after each run, with an ETA from this invocation's pace so far.
  const auto t0 = std::chrono::steady_clock::now();
  size_t finished_now = 0;
  const size_t finished_before = sweep.runs.size() - pending.size();
  while (next < pending.size() || !running.empty()) {
    if (g_stop_signal != 0 && !forwarded) {
      forwarded = true;
      result.stop_signal = g_stop_signal;
      for (const auto& [pid, idx] : running) kill(pid, g_stop_signal);
    }
    if (g_checkpoint_request != 0) {
      g_checkpoint_request = 0;
      for (const auto& [pid, idx] : running) kill(pid, SIGUSR1);
    }
    while (!forwarded && next < pending.size() && static_cast<int>(running.size()) < jobs) {
      RunResult& r = result.results[pending[next]];
      const int lock = lock_run(options.out, r.run.name, options.quiet);
      if (lock < 0) continue;  // stopped while waiting: the loop's top forwards the signal
      ++next;
      if (const std::optional<pid_t> pid = start_run(r, options, threads, lock)) {
        running[*pid] = &r - result.results.data();
      }
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    RunResult& r = result.results[it->second];
    running.erase(it);
    record_exit(r, status, options.quiet);
    ++finished_now;
    if (!options.quiet) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const size_t left = pending.size() - finished_now;
      const auto eta = static_cast<long long>(
          elapsed / static_cast<double>(finished_now) * static_cast<double>(left) + 0.5);
      std::printf("[sweep] %zu/%zu done, %.0fs so far, ETA %lld:%02lld:%02lld\n",
                  finished_before + finished_now, sweep.runs.size(), elapsed, eta / 3600,
                  eta / 60 % 60, eta % 60);
    }
    std::fflush(stdout);
  }
  signals.restore();
  return result;
}

// A number of summary.json's "numerics" object (logging.numerics_every), or null.
static nlohmann::json numerics_field(const nlohmann::json& summary, const char* key) {
  if (!summary.is_object() || !summary.contains(files::numerics_key::kSummaryNumerics)) return {};
  const nlohmann::json& n = summary.at(files::numerics_key::kSummaryNumerics);
  if (!n.is_object() || !n.contains(key) || !n.at(key).is_number()) return {};
  return n.at(key);
}

nlohmann::json result_row(const RunResult& r) {
  const nlohmann::json& s = r.summary;
  auto field = [&](const char* k) { return files::summary_field(s, k); };
  nlohmann::json overrides = r.run.overrides;
  nlohmann::json rate;
  if (field(sk::kSteps).is_number() && field(sk::kSkippedSteps).is_number() &&
      field(sk::kSteps).get<double>() > 0)
    rate = field(sk::kSkippedSteps).get<double>() / field(sk::kSteps).get<double>();
  return {{"name", r.run.name},
          {"setting", r.run.setting},
          {"overrides", overrides},
          {"status", r.status},
          {"error", r.error},
          {"exit_code", r.exit_code},
          {"final_loss", field(sk::kFinalLoss)},
          {"best_eval_loss", field(sk::kBestEvalLoss)},
          {"best_eval_accuracy", field(sk::kBestEvalAccuracy)},
          {"steps", field(sk::kSteps)},
          {"skipped_steps", field(sk::kSkippedSteps)},
          {"overflow_rate", rate},
          {"retries", field(sk::kRetries)},
          {"final_scale", field(sk::kFinalScale)},
          {"min_scale", field(sk::kMinScale)},
          {"max_scale", field(sk::kMaxScale)},
          {"mean_underflow_frac", numerics_field(s, files::numerics_key::kMeanUnderflowFrac)},
          {"min_headroom_log2", numerics_field(s, files::numerics_key::kMinHeadroom)},
          {"wall_time_s", field(sk::kWallTimeS)},
          {"samples_per_s", field(sk::kSamplesPerS)},
          {"run_dir", r.status == "not_started" ? std::string() : r.dir.string()}};
}

const std::vector<std::string>& sweep_metrics() {
  // result_row's numeric fields (exit_code aside).
  static const std::vector<std::string> names{
      "final_loss",  "best_eval_loss",      "best_eval_accuracy",
      "steps",       "skipped_steps",       "overflow_rate",
      "retries",     "final_scale",         "min_scale",
      "max_scale",   "mean_underflow_frac", "min_headroom_log2",
      "wall_time_s", "samples_per_s"};
  return names;
}

std::string default_metric(const std::vector<RunResult>& results) {
  for (const RunResult& r : results) {
    if (files::summary_field(r.summary, sk::kBestEvalLoss).is_number()) return "best_eval_loss";
  }
  return "final_loss";
}

Answer answer(const std::vector<RunResult>& results, const std::string& metric) {
  std::vector<SettingsRun> runs;
  for (const RunResult& r : results) {
    SettingsRun s;
    s.name = r.run.name;
    s.overrides = r.run.overrides;
    s.status = r.status;
    s.setting = r.run.setting;
    const nlohmann::json row = result_row(r);
    for (const auto& [key, value] : row.items()) {
      if (value.is_number() && std::isfinite(value.get<double>())) s.metrics[key] = value;
    }
    // --metric may name any number of summary.json.
    if (!s.metrics.count(metric) && r.summary.is_object() && r.summary.contains(metric) &&
        r.summary[metric].is_number() && std::isfinite(r.summary[metric].get<double>())) {
      s.metrics[metric] = r.summary[metric].get<double>();
    }
    runs.push_back(std::move(s));
  }
  const Verdict v = sweep_verdict(runs, metric);
  Answer a;
  a.line = v.line;
  if (v.best >= 0) {
    const Setting& best = v.settings.settings[static_cast<size_t>(v.best)];
    a.best_setting = best.label;
    a.best_runs = best.runs;
  }
  return a;
}

std::string write_report(const fs::path& out, const std::vector<RunResult>& results,
                         const std::string& metric) {
  static const std::vector<std::string> columns = {"name",
                                                   "overrides",
                                                   "status",
                                                   "error",
                                                   "exit_code",
                                                   "final_loss",
                                                   "best_eval_loss",
                                                   "best_eval_accuracy",
                                                   "steps",
                                                   "skipped_steps",
                                                   "overflow_rate",
                                                   "retries",
                                                   "final_scale",
                                                   "min_scale",
                                                   "max_scale",
                                                   "mean_underflow_frac",
                                                   "min_headroom_log2",
                                                   "wall_time_s",
                                                   "samples_per_s",
                                                   "run_dir"};
  std::string csv;
  for (size_t i = 0; i < columns.size(); ++i) csv += (i ? "," : "") + columns[i];
  csv += "\n";
  nlohmann::json rows = nlohmann::json::array();
  for (const RunResult& r : results) {
    const nlohmann::json row = result_row(r);
    rows.push_back(row);
    for (size_t i = 0; i < columns.size(); ++i) {
      const nlohmann::json& v = row[columns[i]];
      std::string text;
      if (columns[i] == "overrides") {
        for (const auto& o : v) text += (text.empty() ? "" : ";") + o.get<std::string>();
      } else if (v.is_string()) {
        text = v.get<std::string>();
      } else {
        text = json_number(v);
      }
      csv += (i ? "," : "") + csv_field(text);
    }
    csv += "\n";
  }
  const Answer best = answer(results, metric);
  nlohmann::json best_runs = nlohmann::json::array();
  for (size_t i : best.best_runs) best_runs.push_back(results[i].run.name);
  nlohmann::json doc = {
      {"metric", metric},
      {"lower_is_better", metric.find("accuracy") == std::string::npos},
      {"verdict", best.line},
      {"best", best.best_setting.empty() ? nlohmann::json() : nlohmann::json(best.best_setting)},
      {"best_runs", best_runs},
      {"runs", rows}};
  // Atomic: a sweep stopped while writing leaves the previous report, never half of one.
  auto write = [](const fs::path& file, const std::string& text) {
    checkpoint::write_file_atomic(file, text);
  };
  write(out / "sweep.csv", csv);
  write(out / "sweep.json", doc.dump(2) + "\n");

  // The console table.
  std::string table;
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %-11s %12s %12s %7s %7s %9s %12s %8s\n", "run", "status",
                "final_loss", "best_eval", "steps", "skipped", "overflow", "final_scale", "wall_s");
  table += line;
  for (size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json& row = rows[i];
    auto num = [&](const char* k, const char* fmt) {
      char b[64] = "-";
      if (row[k].is_number()) std::snprintf(b, sizeof b, fmt, row[k].get<double>());
      return std::string(b);
    };
    std::string name = row["name"].get<std::string>();
    if (std::find(best.best_runs.begin(), best.best_runs.end(), i) != best.best_runs.end()) {
      name = "* " + name;
    }
    std::snprintf(line, sizeof line, "%-44s %-11s %12s %12s %7s %7s %9s %12s %8s\n", name.c_str(),
                  row["status"].get<std::string>().c_str(), num("final_loss", "%.5g").c_str(),
                  num("best_eval_loss", "%.5g").c_str(), num("steps", "%.0f").c_str(),
                  num("skipped_steps", "%.0f").c_str(), num("overflow_rate", "%.4f").c_str(),
                  num("final_scale", "%g").c_str(), num("wall_time_s", "%.1f").c_str());
    table += line;
  }
  if (!best.best_runs.empty()) table += "(*: the runs of the best setting by " + metric + ")\n";
  table += "verdict: " + best.line + "\n";
  return table;
}

}  // namespace ampctl::sweep
