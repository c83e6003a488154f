// parallel.timeout_s inside parallel/: the collective this rank is waiting in, and a thread that ends the process
// when one wait lasts too long (parallel/context.h, Context::set_timeout).
#pragma once

namespace ppo {

// Marks one collective for the watchdog while it lives (nested ones keep the outer start).
class Waiting {
 public:
  explicit Waiting(const char* what);
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  const char* outer_;
};

// The job's start-up (MPI_Init and the communicators made with it) as one wait, bounded like a collective: begun
// before MPI_Init, ended once the communicators are made. Collectives inside it count from its beginning.
void begin_start_up();
void end_start_up();

// The longest wait in seconds (0: none); the thread, started once, names `rank` in its error line.
void set_watchdog_timeout(double seconds);
double watchdog_timeout();
void start_watchdog(int rank);
void stop_watchdog();

// Rank 0 of a job over several hosts warns when Open MPI would notice a lost host only after `timeout_s`.
void warn_if_lost_host_outlasts(double timeout_s, int rank, bool several_hosts);

}  // namespace ppo
