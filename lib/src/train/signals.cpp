#include "ampctl/train/signals.h"

#include <signal.h>

#include <csignal>

namespace ampctl::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signo) {
  if (g_stop_signal != 0) {
    // The second request: die now, by the signal itself (both calls are async-signal-safe).
    // The signal is blocked while this handler runs, so it is delivered as soon as we return.
    std::signal(signo, SIG_DFL);
    std::raise(signo);
    return;
  }
  g_stop_signal = signo;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // I/O in progress (a checkpoint write) is not cut short by EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() {
  return g_stop_signal;
}

void request_stop(int signo) {
  g_stop_signal = signo;
}

void clear_stop_request() {
  g_stop_signal = 0;
}

int stop_exit_code(int signo) {
  return 128 + signo;
}

}  // namespace ampctl::train
