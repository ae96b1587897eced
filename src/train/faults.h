#pragma once
// Faults the trainer injects into itself on request, so that the reliability tests
// (tests/faults/, docs/faults.md) hit the same point every run instead of racing a kill from
// outside. Off unless the variables are set; nothing here runs in a normal job.
//
//   FSDPP_FAULT_KILL=RANK:STEP   global rank RANK sends itself SIGKILL at training step STEP,
//                                after its backward and before the optimizer step, and only on
//                                the first attempt (FSDPP_RESTART_COUNT unset or 0), so that a
//                                job restarted by fsdpp-run --max-restarts gets past it.
//   FSDPP_FAULT_NAN=STEP         rank 0's loss at step STEP is NaN (so is every gradient).
//   FSDPP_FAULT_NAN=STEP:PARAM   at step STEP, after backward, the gradient of parameter PARAM
//                                is NaN on every rank that holds part of it; the loss is finite.

#include <cstdint>
#include <optional>
#include <string>

namespace fsdpp::train::detail {

// FSDPP_RESTART_COUNT (fsdpp-run sets it: 0 on the first attempt, then 1, 2, ...), else
// TORCHELASTIC_RESTART_COUNT (torchrun's), else 0. Throws ConfigError for a value that is not a
// whole number >= 0.
int restart_count_from_env();

struct FaultPlan {
  std::optional<int64_t> kill_step;  // this rank kills itself at this step
  std::optional<int64_t> nan_step;
  std::string nan_param;  // empty: the loss

  // Reads FSDPP_FAULT_KILL and FSDPP_FAULT_NAN for global rank `rank`; throws ConfigError naming
  // the variable for a malformed value.
  static FaultPlan from_env(int rank, int restart_count);
};

// Prints "[fault] FSDPP_FAULT_KILL: rank R sends itself SIGKILL at step S (t=<unix seconds>)"
// to stderr and does so; does not return.
[[noreturn]] void kill_self(int rank, int64_t step);

}  // namespace fsdpp::train::detail
