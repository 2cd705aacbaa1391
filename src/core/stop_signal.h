// Graceful stop on SIGTERM / SIGUSR1 / SIGINT (Slurm sends one before the time limit). The
// handler only records the signal; rank 0's engine polls it between steps. A process-wide flag
// is the one thing a signal handler may touch, hence the global.
#pragma once

namespace tpllama {

// Exit status of a run stopped early by a signal: finished records are in the output and
// `--resume` continues (EX_TEMPFAIL: "try again later").
constexpr int kExitStoppedEarly = 75;
// A run that answered no request but wrote an error record for each (EX_DATAERR).
constexpr int kExitAllRequestsFailed = 65;

void install_stop_handlers();
// The signal number received (the latest), or 0.
int stop_signal();
// How many stop signals arrived: a second one means "stop now".
int stop_signals_received();

}  // namespace tpllama
