// The stop request a signal handler records (train/signals.cpp installs the handlers), kept in
// core so that long loops below train — reading and parsing data files, generating or
// normalising a data set — can poll it and give up within moments instead of finishing minutes
// of work the run will never use.
//
// Invariant: set_stop_request is async-signal-safe (one store to a sig_atomic_t); the rest is
// called from ordinary code.
#pragma once

namespace ampctl {

// The signal that asked the process to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT), else 0.
int stop_request();
// Records `signo` as the stop request (0 forgets it).
void set_stop_request(int signo);
// "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", else "a signal".
const char* stop_signal_name(int signo);
// Throws Error{interrupted} ("stopped by SIGTERM while WHAT; nothing was trained from it") when
// a stop was requested. Cheap (one load): loops call it once per row or chunk.
void check_stop(const char* what);
// With `deferred`, check_stop never throws: the caller agrees on the stop itself (several ranks
// of a data-parallel job, which must all stop at one point, whichever received the signal).
void set_stop_deferred(bool deferred);
// Whether `signo`'s disposition is SIG_IGN: one inherited at start (`nohup` ignores SIGHUP) is
// kept by whoever would catch the signal. Async-signal-safe (one sigaction call), so a child
// may ask between fork and exec.
bool signal_is_ignored(int signo);

}  // namespace ampctl
