// Signal handlers that only record what was asked; the trainer acts on it (see signals.h).
#include "ampctl/train/signals.h"

#include <signal.h>

#include <csignal>

#include "ampctl/core/interrupt.h"

namespace ampctl::train {
namespace {

volatile std::sig_atomic_t g_checkpoint_request = 0;
int g_agreed_stop = 0;

extern "C" void on_stop_signal(int signo) {
  if (stop_request() != 0) {
    // The second request: die now, by the signal itself (both calls are async-signal-safe).
    // The signal is blocked while this handler runs, so it is delivered as soon as we return.
    std::signal(signo, SIG_DFL);
    std::raise(signo);
    return;
  }
  set_stop_request(signo);
}

extern "C" void on_checkpoint_signal(int) {
  g_checkpoint_request = 1;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // I/O in progress (a checkpoint write) is not cut short by EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Started with SIGHUP ignored (`nohup ampctl train ...`): a hang-up is what the user asked to
  // survive, so it stays ignored (this handler is never SIG_IGN, so a second call asks the same).
  if (!signal_is_ignored(SIGHUP)) sigaction(SIGHUP, &sa, nullptr);
  sigaction(SIGQUIT, &sa, nullptr);
  struct sigaction usr1 {};
  usr1.sa_handler = on_checkpoint_signal;
  sigemptyset(&usr1.sa_mask);
  usr1.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &usr1, nullptr);
}

int stop_signal() {
  return stop_request();
}

void request_stop(int signo) {
  set_stop_request(signo);
}

void clear_stop_request() {
  set_stop_request(0);
}

bool take_checkpoint_request() {
  if (g_checkpoint_request == 0) return false;
  // A second SIGUSR1 between the read and this store merges with the first: one checkpoint
  // after both requests is what both asked for.
  g_checkpoint_request = 0;
  return true;
}

void request_checkpoint() {
  g_checkpoint_request = 1;
}

void note_agreed_stop(int signo) {
  g_agreed_stop = signo;
}

int stop_signal_or_agreed() {
  const int own = stop_request();
  return own != 0 ? own : g_agreed_stop;
}

int stop_exit_code(int signo) {
  return 128 + signo;
}

const char* signal_name(int signo) {
  return stop_signal_name(signo);
}

}  // namespace ampctl::train
