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

#include <cstdint>
#include <optional>
#include <string>

#include "fsdpp/train/hooks.h"

namespace fsdpp::testing {

struct FaultPlan {
  std::optional<int64_t> kill_rank;  // with kill_step: that rank kills itself on the first attempt
  std::optional<int64_t> kill_step;
  std::optional<int64_t> nan_step;
  std::string nan_param;  // empty: the loss

  // Reads FSDPP_FAULT_KILL and FSDPP_FAULT_NAN; throws ConfigError naming the variable for a
  // malformed value.
  static FaultPlan from_env();
};

// The trainer hooks that carry out `plan` (none when the plan is empty).
train::TrainerHooks fault_hooks(const FaultPlan& plan);

// Prints "[fault] FSDPP_FAULT_KILL: rank R sends itself SIGKILL at step S (t=<unix seconds>)"
// to stderr and does so; does not return.
[[noreturn]] void kill_self(int rank, int64_t step);

// This rank's part of the gradient of parameter `name` becomes NaN; throws ConfigError when the
// model has no such parameter.
void inject_nan_grad(torch::nn::Module& model, const std::string& name);

}  // namespace fsdpp::testing
