#pragma once
// Points inside a training step (and a checkpoint save) where the caller's code runs. The
// reliability tests use them to inject a fault at an exact point (tests/support/fault_injection.h:
// a NaN loss or gradient, a rank that kills itself, a slow or failing checkpoint write), so that
// the library itself reads no fault variables; a tool can use them to look at a step.
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
#include <string>

namespace fsdpp::train {

struct StepContext {
  int64_t step;               // 1-based optimizer step
  int rank;                   // global rank
  int restart_count;          // the launcher's restarts of this job so far (FSDPP_RESTART_COUNT)
  torch::nn::Module& model;   // the sharded model: its parameters hold this rank's shards
};

struct TrainerHooks {
  // After each accumulation batch's forward, before its backward. May replace `loss`: the backward and
  // the logged loss then use the replacement. Refused under pipeline parallelism (the loss is
  // computed inside the last stage, microbatch by microbatch).
  std::function<void(const StepContext&, torch::Tensor& loss)> after_loss;
  // After the step's last backward (gradients reduced into the shards), before the gradients are
  // unscaled and clipped and before the optimizer step.
  std::function<void(const StepContext&)> after_backward;
  // Before each checkpoint data file (safetensors) a rank writes, with that rank and the file's
  // path inside the checkpoint's temporary directory (state::SaveOptions::before_write). With
  // training.async_save it runs on the background writer's thread, so it must issue no
  // collectives. An exception it throws fails the save like a failed write: the job stops with a
  // CheckpointError naming the checkpoint (at the next save or at the end, for an asynchronous
  // save), and the checkpoint never appears.
  std::function<void(int rank, const std::string& file)> before_checkpoint_write;
};

}  // namespace fsdpp::train
