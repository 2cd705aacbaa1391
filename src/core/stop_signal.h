// Graceful stop on SIGTERM / SIGUSR1 / SIGINT (Slurm sends one before the time limit). The
// handler only records the signal; rank 0's engine polls it between steps. A process-wide flag
// is the one thing a signal handler may touch, hence the global.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"

namespace tpllama {

// Exit status of a run stopped early by a signal: finished records are in the output and
// `--resume` continues (EX_TEMPFAIL: "try again later").
constexpr int kExitStoppedEarly = 75;
// A run that answered no request but wrote an error record for each (EX_DATAERR).
constexpr int kExitAllRequestsFailed = 65;

// A stop signal ended a wait or a read before any work was done: the command exits with
// kExitStoppedEarly.
class StoppedError : public Error {
 public:
  using Error::Error;
};

// Installs the handlers. One stop that reaches a rank twice within kRelayWindowSeconds (from
// Slurm and again from srun or mpirun, which relay it) counts once; a signal after that counts as
// a second ("stop now").
void install_stop_handlers();
constexpr double kRelayWindowSeconds = 1.0;
// The signal number received (the latest), or 0.
int stop_signal();
// How many stop signals arrived: a second one means "stop now".
int stop_signals_received();
// A stop another rank relays (rank 0 to the replicas' leaders): counted as the signal would be,
// once when it arrives within kRelayWindowSeconds of this rank's own.
void relay_stop_signal(int signal);

// Open MPI's mpirun answers SIGTERM or SIGINT (Ctrl-C) by ending the job: the ranks get SIGTERM,
// then SIGKILL after odls_base_sigkill_timeout seconds (default 1); only SIGUSR1 and SIGUSR2 it
// merely passes on. Returns what rank 0 says at start-up under mpirun, or "" elsewhere. `env`
// reads the environment: getenv, or a stand-in in tests.
std::string mpirun_stop_note(const std::function<const char*(const char*)>& env);

// While alive, ends the process when a stop signal is not carried out in time: grace_seconds plus
// kStopMarginSeconds after the first signal, or kStopMarginSeconds after a second. A rank that
// stalls (a hung node, a stopped process) holds the pipeline, and the ranks waiting on it in MPI
// can neither see the signal nor stop, so under Slurm the job would burn its allocation to the
// limit. This thread says so and exits with status 75, which makes the launcher end the job; the
// records written are complete (one write() each) and --resume continues. By then a normal stop
// has long finished: after the grace period it only waits out the groups in flight.
class StopDeadline {
 public:
  static constexpr double kStopMarginSeconds = 10;
  explicit StopDeadline(double grace_seconds);
  ~StopDeadline();
  StopDeadline(const StopDeadline&) = delete;
  StopDeadline& operator=(const StopDeadline&) = delete;

 private:
  void watch();

  double grace_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;  // under mutex_
  std::thread thread_;
};

// While alive, ends the process when this rank, once it has finished its first pipeline step,
// finishes no further one for `timeout_seconds` (--stall-timeout; 0: never): a hung rank (a
// stopped process, a wedged GPU, a message that never comes) would otherwise hold the whole job,
// without a word, until the scheduler's time limit. At half the timeout it warns; at the timeout
// it says so and exits with status 75, as StopDeadline does, so the launcher ends the job. Each
// message names the rank and what it was doing (at()). Not watched: everything before the first
// step (loading, connecting, rank 0 reading past the requests --resume skips) and after stop().
// Time the process itself spends stopped (a suspended Slurm job: SIGSTOP, then SIGCONT) does not
// count: the watch notices that its own ticks (at most a second apart) came over 5 s late and
// starts again.
class StallWatch {
 public:
  // `who`: the rank's place, e.g. "rank 3 (stage 1, tp rank 1) on n2". `then`: what the user can
  // do after the exit, e.g. "--resume continues".
  StallWatch(double timeout_seconds, std::string who, std::string then);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  void step_done();  // a step finished: the clock starts again
  // What the rank is doing now: a string that outlives the watch (a literal).
  void at(const char* what) { what_.store(what, std::memory_order_relaxed); }
  void stop();  // the watch ends (idempotent; the destructor calls it)

 private:
  using Clock = std::chrono::steady_clock;
  void watch(Clock::time_point previous_tick);

  double timeout_seconds_;
  std::string who_, then_;
  std::atomic<Clock::rep> last_step_{0};  // Clock ticks since its epoch
  std::atomic<long long> steps_{0};
  std::atomic<const char*> what_{"waiting for the first step"};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;  // under mutex_
  std::thread thread_;
};

}  // namespace tpllama
