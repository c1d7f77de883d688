// Stopping a run cleanly on SIGINT / SIGTERM (SPEC section 1: exit 130 / 143 after writing a
// checkpoint).
//
// install_stop_handlers() makes the first SIGINT or SIGTERM only record the signal (an
// async-signal-safe store to a sig_atomic_t). The Trainer polls stop_signal() at every step
// boundary, inside evaluation loops and after loading the data; when it is set, it finishes the
// current step, flushes the metrics, writes a checkpoint and throws Error{interrupted}; the
// command then exits 128 + the signal's number. A second signal restores the default action and
// re-raises it: the process dies at once (the atomic checkpoint writer leaves `latest` naming the
// previous complete checkpoint).
#pragma once

namespace ampctl::train {

// Installs the handlers for SIGINT and SIGTERM (idempotent).
void install_stop_handlers();
// SIGINT or SIGTERM once one asked the run to stop, else 0.
int stop_signal();
// What a first signal does, for tests and tools: records `signo` as the stop request.
void request_stop(int signo);
// Forgets a recorded stop request (tests).
void clear_stop_request();
// The exit code for a run stopped by `signo`: 130 for SIGINT, 143 for SIGTERM (128 + signo).
int stop_exit_code(int signo);

}  // namespace ampctl::train
