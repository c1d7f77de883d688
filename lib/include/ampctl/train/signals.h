// Stopping and checkpointing a run on signals (docs/reference.md, exit codes and signals).
//
// install_stop_handlers() makes the first SIGINT, SIGTERM or SIGHUP only record the signal (an
// async-signal-safe store to a sig_atomic_t). The Trainer polls stop_signal() between
// micro-batches, at every step boundary, inside evaluation loops and after loading the data;
// when it is set it writes a checkpoint of the state after the last complete optimizer step (a
// stop between micro-batches discards the partly accumulated gradients and rewinds the data
// cursor and dropout RNG to that step, so a resume is bitwise the uninterrupted run), flushes
// the metrics and throws Error{interrupted}; the command then exits 128 + the signal's number
// (129 / 130 / 143). A second stop signal restores the default action and re-raises it: the
// process dies at once (the atomic checkpoint writer leaves `latest` naming the previous
// complete checkpoint). SIGHUP is a stop: a job scheduler or a closed session sends it, and the
// run would otherwise be lost without a checkpoint; but a process started with SIGHUP ignored
// (`nohup ampctl train ...`) keeps ignoring it, as nohup asked (core's signal_is_ignored).
//
// SIGQUIT (Ctrl-\\) is a stop as well (exit 131): the issue it fixes is a run lost without a
// checkpoint; a second SIGQUIT still gives its default action, a core dump for debugging a hang.
// The request itself is core's (core/interrupt.h), so data loading polls it too and stops
// within moments (Error{interrupted} before anything was trained: no checkpoint, the new run
// directory removed).
//
// SIGUSR1 records a checkpoint request (what Slurm's --signal sends before a time limit): the
// Trainer writes a checkpoint at the next step boundary and training goes on.
//
// With several ranks every request is agreed at a step boundary (Trainer::agreed_requests): a
// signal any rank received acts on every rank after the same step. Data loading then does not
// give up on its own (set_stop_deferred): the trainer's agreement right after it stops every
// rank together.
//
// Commands install the handlers before they open any input, so no signal finds the default
// action (death without a checkpoint) while a config or data file is read.
#pragma once

namespace ampctl::train {

// Installs the handlers for SIGINT, SIGTERM, SIGHUP (unless it was ignored at start), SIGQUIT
// and SIGUSR1 (idempotent).
void install_stop_handlers();
// SIGINT, SIGTERM, SIGHUP or SIGQUIT once one asked the run to stop, else 0.
int stop_signal();
// What a first signal does, for tests and tools: records `signo` as the stop request.
void request_stop(int signo);
// Forgets a recorded stop request (tests).
void clear_stop_request();
// True once if a checkpoint was requested (SIGUSR1) since the last call: the request is
// consumed.
bool take_checkpoint_request();
// What SIGUSR1 does, for tests and tools.
void request_checkpoint();
// The stop the ranks agreed on (several ranks): a rank that did not receive the signal itself
// exits as the others do. Recorded apart from stop_signal(), so that the signal, when it does
// reach this rank later, is still a first request (not the second one that kills the process).
void note_agreed_stop(int signo);
// stop_signal(), else the agreed stop, else 0: what decides a stopped run's exit code.
int stop_signal_or_agreed();
// The exit code for a run stopped by `signo`: 129 for SIGHUP, 130 for SIGINT, 131 for SIGQUIT,
// 143 for SIGTERM (128 + signo).
int stop_exit_code(int signo);
// "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", else "a signal".
const char* signal_name(int signo);

}  // namespace ampctl::train
