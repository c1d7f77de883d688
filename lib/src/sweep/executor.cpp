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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "ampctl/core/error.h"
#include "ampctl/run/summary.h"
#include "ampctl/sweep/sweep.h"

namespace ampctl::sweep {

namespace fs = std::filesystem;
namespace files = ampctl::run;  // the run directory's formats
namespace sk = ampctl::run::summary_key;

namespace {

volatile sig_atomic_t g_stop_signal = 0;

extern "C" void ampctl_sweep_on_stop_signal(int signo) {
  g_stop_signal = signo;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

// The last "error: ..." line of a log, else its last non-empty line.
std::string last_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line, last, last_error;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (line.rfind("error: ", 0) == 0) last_error = line;
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
            int threads) {
  const std::string out_log = (dir / "stdout.log").string();
  const std::string err_log = (dir / "stderr.log").string();
  const std::string exe_s = exe.string();
  const std::string threads_s = std::to_string(threads);
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
    // A sweep that dies without forwarding (SIGKILL, a crash) still stops its runs the clean way:
    // SIGTERM makes each write a checkpoint and exit, so a re-run resumes them.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) raise(SIGTERM);
    const int out = open(out_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int err = open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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

ExecResult execute(const Sweep& sweep, const ExecOptions& options) {
  ExecResult result;
  const int jobs = std::max(1, options.jobs);
  const int threads = std::max(1, usable_cores() / jobs);
  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec)
    throw Error{ErrorKind::runtime, "cannot create " + options.out.string() + ": " + ec.message()};

  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = ampctl_sweep_on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<size_t> pending;
  for (const Run& run : sweep.runs) {
    RunResult r;
    r.run = run;
    r.dir = options.out / run.name;
    r.status = "skipped";
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

  std::map<pid_t, size_t> running;
  size_t next = 0;
  bool forwarded = false;
  while (next < pending.size() || !running.empty()) {
    if (g_stop_signal != 0 && !forwarded) {
      forwarded = true;
      result.stop_signal = g_stop_signal;
      for (const auto& [pid, idx] : running) kill(pid, g_stop_signal);
    }
    while (!forwarded && next < pending.size() && static_cast<int>(running.size()) < jobs) {
      RunResult& r = result.results[pending[next]];
      const int lock = lock_run(options.out, r.run.name, options.quiet);
      if (lock < 0) continue;  // stopped while waiting: the loop's top forwards the signal
      ++next;
      std::vector<std::string> args;
      if (has_checkpoint(r.dir)) {
        args = {"resume", "--checkpoint", r.dir.string()};
        if (!options.quiet) std::printf("[sweep] %s: resuming\n", r.run.name.c_str());
      } else {
        // Leftovers of a run that died before its first checkpoint: start over.
        fs::remove_all(r.dir, ec);
        fs::create_directories(r.dir, ec);
        std::ofstream cfg(r.dir / "config.yaml");
        cfg << r.run.resolved_yaml;
        cfg.close();
        if (!cfg)
          throw Error{ErrorKind::runtime, "cannot write " + (r.dir / "config.yaml").string()};
        args = {"train", "--config", (r.dir / "config.yaml").string(), "--run-dir", r.dir.string()};
        if (!options.quiet) std::printf("[sweep] %s: starting\n", r.run.name.c_str());
      }
      std::fflush(stdout);
      r.trained = true;
      pid_t pid = -1;
      try {
        pid = spawn(options.exe, args, r.dir, threads);
      } catch (...) {
        close(lock);
        throw;
      }
      close(lock);  // the child holds it now
      running[pid] = &r - result.results.data();
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
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r.exit_code == 0 && fs::exists(r.dir / files::kSummaryFile, ec)) {
      r.summary = read_json(r.dir / files::kSummaryFile);
      r.status = files::summary_status(r.summary);
      if (!options.quiet) std::printf("[sweep] %s: %s\n", r.run.name.c_str(), r.status.c_str());
    } else {
      std::string err = last_line(r.dir / "stderr.log");
      if (err.rfind("error: ", 0) == 0) err = err.substr(7);
      r.error = err;
      if (r.exit_code == 130 || r.exit_code == 143) {
        r.status = "interrupted";
      } else {
        // A run that stopped because training diverged says so in its summary (exit 1).
        r.summary = read_json(r.dir / files::kSummaryFile);
        r.status =
            r.summary.is_object() && files::summary_status(r.summary) == files::kStatusDiverged
                ? "diverged"
                : "failed";
      }
      if (!options.quiet)
        std::printf("[sweep] %s: %s (exit %d): %s\n", r.run.name.c_str(), r.status.c_str(),
                    r.exit_code, err.c_str());
    }
    std::fflush(stdout);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
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
          {"final_scale", field(sk::kFinalScale)},
          {"min_scale", field(sk::kMinScale)},
          {"max_scale", field(sk::kMaxScale)},
          {"wall_time_s", field(sk::kWallTimeS)},
          {"samples_per_s", field(sk::kSamplesPerS)},
          {"run_dir", r.dir.string()}};
}

std::string default_metric(const std::vector<RunResult>& results) {
  for (const RunResult& r : results) {
    if (files::summary_field(r.summary, sk::kBestEvalLoss).is_number()) return "best_eval_loss";
  }
  return "final_loss";
}

int best_run(const std::vector<RunResult>& results, const std::string& metric) {
  const bool higher = metric.find("accuracy") != std::string::npos;
  int best = -1;
  double best_v = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const RunResult& r = results[i];
    if (r.status != "ok") continue;
    const nlohmann::json row = result_row(r);
    nlohmann::json v = row.contains(metric) ? row[metric] : nlohmann::json();
    if (v.is_null() && r.summary.is_object() && r.summary.contains(metric)) v = r.summary[metric];
    if (!v.is_number()) continue;
    const double d = v.get<double>();
    if (best < 0 || (higher ? d > best_v : d < best_v)) {
      best = static_cast<int>(i);
      best_v = d;
    }
  }
  return best;
}

std::string write_report(const fs::path& out, const std::vector<RunResult>& results,
                         const std::string& metric) {
  static const std::vector<std::string> columns = {
      "name",      "overrides",     "status",         "error",
      "exit_code", "final_loss",    "best_eval_loss", "best_eval_accuracy",
      "steps",     "skipped_steps", "overflow_rate",  "final_scale",
      "min_scale", "max_scale",     "wall_time_s",    "samples_per_s",
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
  const int best = best_run(results, metric);
  nlohmann::json doc = {
      {"metric", metric},
      {"lower_is_better", metric.find("accuracy") == std::string::npos},
      {"best", best >= 0 ? nlohmann::json(results[best].run.name) : nlohmann::json()},
      {"runs", rows}};
  auto write = [](const fs::path& file, const std::string& text) {
    std::ofstream f(file);
    f << text;
    f.close();
    if (!f) throw Error{ErrorKind::runtime, "cannot write " + file.string()};
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
    if (static_cast<int>(i) == best) name = "* " + name;
    std::snprintf(line, sizeof line, "%-44s %-11s %12s %12s %7s %7s %9s %12s %8s\n", name.c_str(),
                  row["status"].get<std::string>().c_str(), num("final_loss", "%.5g").c_str(),
                  num("best_eval_loss", "%.5g").c_str(), num("steps", "%.0f").c_str(),
                  num("skipped_steps", "%.0f").c_str(), num("overflow_rate", "%.4f").c_str(),
                  num("final_scale", "%g").c_str(), num("wall_time_s", "%.1f").c_str());
    table += line;
  }
  table += best >= 0 ? "best by " + metric + ": " + results[best].run.name + "\n"
                     : "best by " + metric + ": none\n";
  return table;
}

}  // namespace ampctl::sweep
