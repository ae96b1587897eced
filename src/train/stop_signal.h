#pragma once
// SIGTERM and SIGINT as a request to stop at the next step boundary, so that a preempted job
// (clusters send SIGTERM, then SIGKILL after a grace period; fsdpp-run does the same) finishes
// its checkpoint in flight and exits cleanly instead of dying in the middle of one. A second
// signal of either kind ends the process at once, as it would have without this.
//
// Signal dispositions are process-wide: the one piece of process-wide state of the trainer.
// While a StopSignal lives it owns them; its destructor puts back the previous handlers.

#include <csignal>

namespace fsdpp::train::detail {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received (SIGTERM or SIGINT) since construction, or 0.
  int received() const;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

}  // namespace fsdpp::train::detail
