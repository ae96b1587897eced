#pragma once
// Faults a training job injects into itself on request, so that the reliability tests
// (tests/faults/, docs/faults.md) hit the same point every run instead of racing a kill from
// outside. Test support only: the shipped fsdpp-train reads none of these variables; the tests
// start fsdpp-train-faults (fsdpp_train_faults.cpp), which installs these hooks.
//
//   FSDPP_FAULT_KILL=RANK:STEP   global rank RANK sends itself SIGKILL at training step STEP,
//                                after its backward and before the optimizer step, and only on
//                                the first attempt (FSDPP_RESTART_COUNT unset or 0), so that a
//                                job restarted by fsdpp-run --max-restarts gets past it.
//   FSDPP_FAULT_NAN=STEP         rank 0's loss at step STEP is NaN (so is every gradient).
//   FSDPP_FAULT_NAN=STEP:PARAM   at step STEP, after backward, the gradient of parameter PARAM
//                                is NaN on every rank that holds part of it; the loss is finite.
//   FSDPP_FAULT_SAVE_DELAY_MS=N  every checkpoint data file (safetensors) a rank writes starts N ms
//                                late (slow storage; lets a test kill a job in the middle of a
//                                save). 0: no delay.
//   FSDPP_FAULT_SAVE_FAIL=R      rank R's checkpoint data files fail to be written:
//                                "[state] '<file>': write failed (FSDPP_FAULT_SAVE_FAIL=R injected it)".
// The last two act through TrainerHooks::before_checkpoint_write (state::SaveOptions::before_write).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "fsdpp/train/hooks.h"

namespace fsdpp::testing {

struct FaultPlan {
  std::optional<int64_t> kill_rank;  // with kill_step: that rank kills itself on the first attempt
  std::optional<int64_t> kill_step;
  std::optional<int64_t> nan_step;
  std::string nan_param;  // empty: the loss
  int64_t save_delay_ms = 0;             // FSDPP_FAULT_SAVE_DELAY_MS
  std::optional<int64_t> save_fail_rank;  // FSDPP_FAULT_SAVE_FAIL

  // Reads FSDPP_FAULT_KILL, FSDPP_FAULT_NAN, FSDPP_FAULT_SAVE_DELAY_MS and FSDPP_FAULT_SAVE_FAIL;
  // throws ConfigError naming the variable for a malformed value.
  static FaultPlan from_env();
};

// The trainer hooks that carry out `plan` (none when the plan is empty).
train::TrainerHooks fault_hooks(const FaultPlan& plan);

// What FSDPP_FAULT_SAVE_DELAY_MS and FSDPP_FAULT_SAVE_FAIL ask for, as a state::SaveOptions::
// before_write hook (null when the plan has neither): sleeps save_delay_ms, then throws
// CheckpointError on rank save_fail_rank.
std::function<void(int rank, const std::string& file)> save_fault_hook(const FaultPlan& plan);

// Prints "[fault] FSDPP_FAULT_KILL: rank R sends itself SIGKILL at step S (t=<unix seconds>)"
// to stderr and does so; does not return.
[[noreturn]] void kill_self(int rank, int64_t step);

// This rank's part of the gradient of parameter `name` becomes NaN; throws ConfigError when the
// model has no such parameter.
void inject_nan_grad(torch::nn::Module& model, const std::string& name);

}  // namespace fsdpp::testing
