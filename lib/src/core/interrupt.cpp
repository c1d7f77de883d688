#include "ampctl/core/interrupt.h"

#include <signal.h>

#include <csignal>
#include <string>

#include "ampctl/core/error.h"

namespace ampctl {
namespace {

volatile std::sig_atomic_t g_stop_request = 0;

}  // namespace

int stop_request() {
  return g_stop_request;
}

void set_stop_request(int signo) {
  g_stop_request = signo;
}

const char* stop_signal_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return "a signal";
  }
}

namespace {
bool g_stop_deferred = false;
}

void set_stop_deferred(bool deferred) {
  g_stop_deferred = deferred;
}

void check_stop(const char* what) {
  const int signo = g_stop_request;
  if (signo == 0 || g_stop_deferred) return;
  throw Error{ErrorKind::interrupted, std::string("stopped by ") + stop_signal_name(signo) +
                                          " while " + what +
                                          "; nothing was trained, no checkpoint written"};
}

bool signal_is_ignored(int signo) {
  struct sigaction current {};
  return sigaction(signo, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

}  // namespace ampctl
