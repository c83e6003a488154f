// See parallel/watchdog.h.
#include "parallel/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace ppo {
namespace {

// parallel.timeout_s: the collective this rank is waiting in and since when, watched by a thread that ends the
// process when the wait is too long. mpirun then ends the job (a rank exited without MPI_Finalize), stopped ranks
// included, where the collectives themselves would wait forever. A lost host is Open MPI's to notice, and earlier
// (warn_if_lost_host_outlasts below).
struct Watchdog {
  std::atomic<const char*> waiting_in{nullptr};
  std::atomic<int64_t> since_ms{0};
  std::atomic<double> timeout_s{0.0};
  std::atomic<bool> stop{false};
  std::thread thread;
};
Watchdog g_watchdog;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watch(int rank) {
  while (!g_watchdog.stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const char* what = g_watchdog.waiting_in;
    const double waited = static_cast<double>(now_ms() - g_watchdog.since_ms) / 1000.0;
    if (what == nullptr || g_watchdog.timeout_s <= 0.0 || waited <= g_watchdog.timeout_s) continue;
    std::fprintf(stderr,
                 "error: [rank %d] %s waited %.0f s for the other ranks (parallel.timeout_s=%g): a rank has stopped "
                 "or is far behind, or a host or the link to it is down; ending the job\n",
                 rank, what, waited, g_watchdog.timeout_s.load());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace

Waiting::Waiting(const char* what) : outer_(g_watchdog.waiting_in) {
  if (outer_ != nullptr) return;
  g_watchdog.since_ms = now_ms();
  g_watchdog.waiting_in = what;
}

Waiting::~Waiting() {
  if (outer_ == nullptr) g_watchdog.waiting_in = nullptr;
}

constexpr const char* kStartUp = "start-up (MPI_Init, before any step)";

void begin_start_up() {
  g_watchdog.since_ms = now_ms();
  g_watchdog.waiting_in = kStartUp;
}

void end_start_up() {
  const char* expected = kStartUp;
  g_watchdog.waiting_in.compare_exchange_strong(expected, nullptr);
}

void set_watchdog_timeout(double seconds) {
  g_watchdog.timeout_s = seconds;
}

double watchdog_timeout() {
  return g_watchdog.timeout_s;
}

void start_watchdog(int rank) {
  if (!g_watchdog.thread.joinable()) g_watchdog.thread = std::thread(watch, rank);
}

void stop_watchdog() {
  g_watchdog.stop = true;
  if (g_watchdog.thread.joinable()) g_watchdog.thread.join();
}

// Open MPI notices a lost host or link only by TCP keepalive on its daemons' connections: oob_tcp_keepalive_time idle
// seconds, then oob_tcp_keepalive_probes probes oob_tcp_keepalive_intvl seconds apart (300 + 9 x 20 = 480 s unless
// mpirun's --mca or OMPI_MCA_* say otherwise; a time of 0 turns it off). It must come before the watchdog: once a rank
// has ended, mpirun waits for the lost daemon until the kernel gives up on the connection (net.ipv4.tcp_retries2, about
// 15 minutes; scripts/two_hosts.sh shows both orders). Warns on rank 0 of a job over several hosts when it would not.
void warn_if_lost_host_outlasts(double timeout_s, int rank, bool several_hosts) {
  if (rank != 0 || !several_hosts || timeout_s <= 0.0 || !std::getenv("OMPI_COMM_WORLD_SIZE")) return;
  auto mca = [](const char* name, double fallback) {
    const char* value = std::getenv((std::string("OMPI_MCA_oob_tcp_keepalive_") + name).c_str());
    return value ? std::atof(value) : fallback;
  };
  const double idle_s = mca("time", 300), lost_host_s = idle_s + mca("probes", 9) * mca("intvl", 20);
  if (idle_s > 0.0 && lost_host_s < timeout_s) return;
  const std::string takes =
      idle_s > 0.0 ? std::to_string(std::lround(lost_host_s)) + " s: oob_tcp_keepalive_time + _probes x _intvl"
                   : "never: oob_tcp_keepalive_time=0";
  const long idle = std::max(1L, std::lround(timeout_s / 3)), interval = std::max(1L, std::lround(timeout_s / 12));
  std::cerr << "warning: parallel.timeout_s=" << timeout_s << " is not longer than Open MPI takes to notice a lost "
            << "host (" << takes << "): should a host or the link to it be lost, the watchdog ends the ranks and "
            << "mpirun then waits ~15 min for that host's daemon\n---> HINT: pass mpirun --mca oob_tcp_keepalive_time "
            << idle << " --mca oob_tcp_keepalive_intvl " << interval
            << " --mca oob_tcp_keepalive_probes 4 (scripts/two_hosts.sh explains)" << std::endl;
}

}  // namespace ppo
