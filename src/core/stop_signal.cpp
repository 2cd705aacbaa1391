// Signal handlers for a graceful stop.
#include "core/stop_signal.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include <time.h>

#include "core/log.h"

namespace tpllama {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};
std::atomic<long long> g_first_signal_ns{
    0};  // CLOCK_MONOTONIC at the first stop signal; 0: none yet

// One stop often reaches a rank twice within milliseconds: from Slurm and again from srun or
// mpirun, which relay it. Only a signal this long after the first counts as a second ("stop now").
constexpr long long kRelayWindowNs = static_cast<long long>(kRelayWindowSeconds * 1e9);

extern "C" void on_stop_signal(int signal) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const long long ns = static_cast<long long>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  g_stop_signal.store(signal, std::memory_order_relaxed);
  long long first = 0;
  if (g_first_signal_ns.compare_exchange_strong(first, ns, std::memory_order_relaxed) ||
      ns - first >= kRelayWindowNs)
    g_stop_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // MPI calls and reads are not interrupted
  for (int s : {SIGTERM, SIGUSR1, SIGINT}) sigaction(s, &action, nullptr);
}

int stop_signal() {
  return g_stop_signal.load(std::memory_order_relaxed);
}

void relay_stop_signal(int signal) {
  on_stop_signal(signal);
}

int stop_signals_received() {
  return g_stop_count.load(std::memory_order_relaxed);
}

std::string mpirun_stop_note(const std::function<const char*(const char*)>& env) {
  if (env("OMPI_MCA_orte_hnp_uri") == nullptr)
    return "";                // set for every rank mpirun starts (Open MPI 4)
  std::string timeout = "1";  // Open MPI's default
  const char* value = env("OMPI_MCA_odls_base_sigkill_timeout");
  if (value != nullptr && *value != '\0') timeout = value;
  return "under mpirun, a SIGTERM or Ctrl-C to mpirun does not give the graceful stop: Open MPI "
         "ends the ranks "
         "(SIGTERM, then SIGKILL " +
         timeout +
         " s later: odls_base_sigkill_timeout) and exits 1, abandoning the "
         "running requests (the records written stay whole, --resume continues). For the graceful "
         "stop (exit status "
         "75) send mpirun SIGUSR1 (kill -USR1 <mpirun pid>)";
}

StopDeadline::StopDeadline(double grace_seconds)
    : grace_seconds_(grace_seconds), thread_(&StopDeadline::watch, this) {}

StopDeadline::~StopDeadline() {
  {
    std::lock_guard<std::mutex> hold(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StopDeadline::watch() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point first{}, second{};
  std::unique_lock<std::mutex> hold(mutex_);
  while (!wake_.wait_for(hold, std::chrono::milliseconds(200), [this] { return done_; })) {
    const int signals = stop_signals_received();
    const Clock::time_point now = Clock::now();
    if (signals >= 1 && first == Clock::time_point{}) first = now;
    if (signals >= 2 && second == Clock::time_point{}) second = now;
    if (first == Clock::time_point{}) continue;
    const auto seconds_since = [&](Clock::time_point t) {
      return std::chrono::duration<double>(now - t).count();
    };
    const bool late = seconds_since(first) > grace_seconds_ + kStopMarginSeconds ||
                      (second != Clock::time_point{} && seconds_since(second) > kStopMarginSeconds);
    if (!late) continue;
    log::error("the run did not stop within " +
               std::to_string(static_cast<int>(seconds_since(first))) +
               " s of the stop signal (--grace-seconds " +
               std::to_string(static_cast<int>(grace_seconds_)) + " + " +
               std::to_string(static_cast<int>(kStopMarginSeconds)) +
               " s): a rank is not answering; ending this one, so the launcher ends the job (exit "
               "status 75; "
               "the records written are complete, --resume continues)");
    std::fflush(stderr);
    std::_Exit(kExitStoppedEarly);
  }
}

StallWatch::StallWatch(double timeout_seconds, std::string who, std::string then)
    : timeout_seconds_(timeout_seconds), who_(std::move(who)), then_(std::move(then)) {
  // The thread's first tick counts from now, so a pause before the thread first runs is seen too.
  if (timeout_seconds_ > 0) thread_ = std::thread(&StallWatch::watch, this, Clock::now());
}

StallWatch::~StallWatch() {
  stop();
}

void StallWatch::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> hold(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StallWatch::step_done() {
  last_step_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  steps_.fetch_add(1, std::memory_order_relaxed);
}

void StallWatch::watch(Clock::time_point previous_tick) {
  const auto tick = std::chrono::duration<double>(std::min(1.0, timeout_seconds_ / 10));
  // A tick this late means the process was stopped, not that the steps stalled.
  const auto paused = std::max(std::chrono::duration<double>(5.0), 5 * tick);
  Clock::time_point resumed{};
  long long warned_at_steps = -1;  // the step count when it last warned
  std::unique_lock<std::mutex> hold(mutex_);
  while (!wake_.wait_for(hold, tick, [this] { return done_; })) {
    const Clock::time_point now = Clock::now();
    if (now - previous_tick > paused) resumed = now;  // the stopped time does not count
    previous_tick = now;
    const long long steps = steps_.load(std::memory_order_relaxed);
    if (steps == 0) continue;  // not watched before the first step
    const Clock::time_point last = std::max(
        resumed, Clock::time_point(Clock::duration(last_step_.load(std::memory_order_relaxed))));
    const double idle = std::chrono::duration<double>(now - last).count();
    if (idle < timeout_seconds_ / 2 || (idle < timeout_seconds_ && warned_at_steps == steps))
      continue;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(timeout_seconds_ < 1    ? 2
                 : timeout_seconds_ < 10 ? 1
                                         : 0);  // a short timeout in parts: not "0 s"
    os << who_ << ": no pipeline step for " << (timeout_seconds_ < 10 ? idle : std::floor(idle))
       << " s (" << steps << " steps done; now " << what_.load(std::memory_order_relaxed) << ")";
    std::ostringstream timeout;
    timeout << timeout_seconds_;
    if (idle >= timeout_seconds_) {
      log::error(
          os.str() +
          "; a rank is hung or a message never came: ending this one after --stall-timeout " +
          timeout.str() + " s, so the launcher ends the job (exit status 75; " + then_ + ")");
      std::fflush(stderr);
      std::_Exit(kExitStoppedEarly);
    }
    log::warn(os.str() + "; the job ends at --stall-timeout " + timeout.str() + " s");
    warned_at_steps = steps;
  }
}

}  // namespace tpllama
