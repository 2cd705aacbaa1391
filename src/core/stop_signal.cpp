// Signal handlers for a graceful stop.
#include "core/stop_signal.h"

#include <atomic>
#include <csignal>

namespace tpllama {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};

extern "C" void on_stop_signal(int signal) {
  g_stop_signal.store(signal, std::memory_order_relaxed);
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

int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }

int stop_signals_received() { return g_stop_count.load(std::memory_order_relaxed); }

}  // namespace tpllama
