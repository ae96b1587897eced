#pragma once
// Points inside a training step where the caller's code runs. The reliability tests use them to
// inject a fault at an exact step (tests/support/fault_injection.h: a NaN loss or gradient, a
// rank that kills itself), so that the library itself reads no fault variables; a tool can use
// them to look at a step.
//
//   TrainerHooks hooks;
//   hooks.after_backward = [](const StepContext& c) {
//     if (c.step == 5) std::printf("rank %d finished backward of step 5\n", c.rank);
//   };
//   Trainer(cfg, world, hooks).run();
//
// A hook runs on every rank. One that issues collectives must issue the same ones on every rank;
// an exception it throws ends run() like any error of the step.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace fsdpp::train {

struct StepContext {
  int64_t step;               // 1-based optimizer step
  int rank;                   // global rank
  int restart_count;          // the launcher's restarts of this job so far (FSDPP_RESTART_COUNT)
  torch::nn::Module& model;   // the sharded model: its parameters hold this rank's shards
};

struct TrainerHooks {
  // After each micro-batch's forward, before its backward. May replace `loss`: the backward and
  // the logged loss then use the replacement.
  std::function<void(const StepContext&, torch::Tensor& loss)> after_loss;
  // After the step's last backward (gradients reduced into the shards), before the gradients are
  // unscaled and clipped and before the optimizer step.
  std::function<void(const StepContext&)> after_backward;
};

}  // namespace fsdpp::train
