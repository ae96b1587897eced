#pragma once
// The plan of a model that is a chain of units, a torch::nn::Sequential (the shape AiDotNet's
// Pipeline.Wrap and torch.distributed.pipelining's manual split take), for
// fsdpp::parallel::parallelize and train()'s custom models (docs/custom-models.md#parallelism):
//
//   torch::nn::Sequential net(torch::nn::Linear(16, 64), torch::nn::GELU(),
//                             torch::nn::Linear(64, 256), torch::nn::GELU(),
//                             torch::nn::Linear(256, 64), ResidualBlock(64), torch::nn::Linear(64, 4));
//   auto plan = parallel::sequential_plan(net, {
//       .name = "mlp",
//       .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); },
//       .tensor_parallel = {{"2", tp::ParallelStyle::COLWISE}, {"4", tp::ParallelStyle::ROWWISE}},
//       .blocks = {"ResidualBlock"}});
//   auto p = parallel::parallelize(plan, *world, {.pp = 2, .tp = 2}, options);
//
// Pipeline: the units are the Sequential's children; a stage is a range of them (the pipeline's
// cut, parallelize's layers_per_stage or an even split), holding the model's own modules under
// their names (pipeline::split_blocks), so checkpoints of any cut are the whole model's. The last
// stage computes `loss` on its output.
// Tensor parallelism, as PyTorch's parallelize_module with ColwiseParallel / RowwiseParallel:
// Linear units named by their path in the chain ("2", or "3.0" inside a unit that is a
// Sequential too: a subclass of torch::nn::SequentialImpl with forward(at::Tensor), as LibTorch
// stores modules in a Sequential only with a forward of fixed types)
// split COLWISE (output features; the input's gradient all-reduced) or ROWWISE (input features;
// the output all-reduced, the bias added once). The plan runs the chain itself, so it makes the
// communication the styles need (LibTorch's modules have no forward hooks); a unit with a forward
// of its own (a residual block) stays whole on every tp rank. Every COLWISE must be followed by
// a ROWWISE, with only parameterless units (activations) between them: otherwise the output
// would not be the single-process model's, and the plan is refused (ConfigError naming the unit).
// Sequence parallelism is refused (the chain has no sequence dimension of its own).
//
// Every unit takes and returns one tensor. The model's forward is the chain: units called in
// order through fsdpp::forward (a unit that is an FSDP unit gathers; a checkpointed one
// recomputes), the root itself too.

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/models/model_plan.h"
#include "fsdpp/tp/plan.h"

namespace fsdpp::parallel {

struct SequentialPlanOptions {
  std::string name = "Sequential";  // for messages
  // The loss of the chain's output (float32 under mixed precision) against a batch's targets: a
  // floating-point scalar, the mean over the batch's rows. Required.
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> loss;
  // Linear units by their path in the chain -> the dimension tensor parallelism splits.
  tp::ParallelPlan tensor_parallel;
  // The class names of the blocks (block_classes()): FSDP units and activation checkpointing.
  std::vector<std::string> blocks;
};

// ConfigError for an empty model, no loss, or a tensor-parallel plan that names no Linear unit
// of the chain or is not sound (see above), before anything is changed.
std::shared_ptr<models::ModelPlan> sequential_plan(torch::nn::Sequential model, SequentialPlanOptions options);

}  // namespace fsdpp::parallel
