#pragma once
// A pipeline stage as the runtime sees it: a module (its parameters: what the optimizer steps,
// FSDP shards and clipping counts) and a forward from one tensor to one tensor; the last stage
// also has the loss. The pipeline knows no model: models cut themselves into stages
// (fsdpp/models/llama_stages.h) and make_stage wraps any module with forward(at::Tensor).
//
//   auto stages = models::split_llama(model, models::even_units_per_stage(units, 4));
//   auto s = pipeline::make_stage(3, stages[3], [&](const at::Tensor& logits,
//                                                   const at::Tensor& targets) {
//     return stages[3]->loss(logits, targets);
//   });

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp::pipeline {

// What a stage takes in: sizes with -1 for "any" (the batch dim), and a dtype.
struct TensorSpec {
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
};

struct PipelineStage {
  int index = -1;                          // the stage's number in the schedule
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  // Optional: the forward of a step that carries rows every stage reads besides its input
  // (PipelineRuntime::step's `shared`; a language model's token positions, which the attention
  // of every block needs): x and this microbatch's rows of them.
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& shared)> forward_shared;
  // The last stage only: the mean loss of one microbatch's output against its targets.
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> loss;
  // Optional: what this stage expects from the previous one, checked against the previous
  // stage's first output before any activation moves (empty: any shape and dtype).
  std::optional<TensorSpec> input_spec;
};

// A stage over `module` (a ModuleHolder or std::shared_ptr of an Impl with at::Tensor
// forward(const at::Tensor&)), called through fsdpp::forward so that a fully_shard-ed module
// gathers its parameters (a plain call otherwise).
template <typename M>
PipelineStage make_stage(int index, M module,
                         std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss = {},
                         std::optional<TensorSpec> input_spec = std::nullopt) {
  PipelineStage s;
  s.index = index;
  if constexpr (requires { module.ptr(); }) {
    s.module = module.ptr();
  } else {
    s.module = module;
  }
  s.forward = [module](const at::Tensor& x) mutable { return fsdpp::forward(module, x); };
  s.loss = std::move(loss);
  s.input_spec = std::move(input_spec);
  return s;
}

}  // namespace fsdpp::pipeline
