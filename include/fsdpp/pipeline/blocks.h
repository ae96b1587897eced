#pragma once
// A model that is a sequence of blocks (torch::nn::Sequential), cut into pipeline stages by
// ranges of blocks, as AiDotNet's Pipeline.Wrap(model, stages) writes model.Layers[..6] and
// torch.distributed.pipelining's manual split does:
//
//   torch::nn::Sequential model(...);                       // say 24 blocks
//   std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss = [](auto& y, auto& t) {...};
//   auto sched = pipeline::make_schedule("1F1B", pp->size(), /*microbatches=*/8);
//   auto stages = pipeline::split_blocks(model, {{0, 6}, {6, 12}, {12, 18}, {18, 24}});
//   // or pipeline::even_ranges(model->size(), sched.num_stages)
//   std::vector<pipeline::PipelineStage> mine;
//   for (int s : sched.stages_of(pp->rank()))
//     mine.push_back(pipeline::make_stage(s, stages[s], s == sched.num_stages - 1 ? loss : nullptr));
//   pipeline::PipelineRuntime rt(sched, std::move(mine), pp, {.store = world->store()});
//
// A stage is a BlockStage holding the model's own block modules (the parameters are shared, not
// copied), each registered under its index in the model, so that a stage's parameter names are
// the model's ("6.weight") and checkpoints of the stages are the whole model's. Its forward calls
// each block through fsdpp::forward: fully_shard a stage's blocks and then the stage to shard it
// over data-parallel ranks as well (pp x FSDP), or mark blocks for activation checkpointing.
// Each block takes and returns one tensor.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace fsdpp::pipeline {

struct BlockRange {
  int64_t begin = 0, end = 0;  // blocks [begin, end)
};

// `stages` consecutive ranges over `blocks` blocks, sizes differing by at most one (the first
// stages get the extra blocks). ConfigError when there are fewer blocks than stages.
std::vector<BlockRange> even_ranges(int64_t blocks, int stages);

class BlockStageImpl : public torch::nn::Module {
 public:
  BlockStageImpl(const torch::nn::Sequential& model, BlockRange range);
  at::Tensor forward(at::Tensor x);
  BlockRange range() const { return range_; }

 private:
  // What fsdpp::forward calls: one block's forward through its AnyModule.
  struct Call {
    torch::nn::AnyModule* block;
    at::Tensor forward(const at::Tensor& x) { return block->forward(x); }
  };
  BlockRange range_;
  std::vector<torch::nn::AnyModule> blocks_;
  std::vector<Call> calls_;
};
TORCH_MODULE(BlockStage);

// One stage per range. The ranges must cover the model's blocks in order, each non-empty:
// otherwise a ConfigError naming the stage, its range and the model's number of blocks.
std::vector<BlockStage> split_blocks(const torch::nn::Sequential& model, const std::vector<BlockRange>& ranges);

}  // namespace fsdpp::pipeline
