// A model of your own with tensor and pipeline parallelism (docs/custom-models.md#parallelism):
// a chain of units (torch::nn::Sequential), trained by fsdpp::train::train with its plan,
// parallel::sequential_plan: the pipeline cut by ranges of its units, two of its Linears split
// over the tensor-parallel ranks, the residual blocks FSDP units. The parallelism comes from the
// config, as fsdpp-train's:
//
//   build/bin/fsdpp-run --nproc-per-node 2 build/bin/fsdpp-example-sequential \
//       training.output_dir=/tmp/seq parallelism.pipeline_parallel_degree=2
//   build/bin/fsdpp-run --nproc-per-node 2 build/bin/fsdpp-example-sequential \
//       training.output_dir=/tmp/seq-tp parallelism.tensor_parallel_degree=2
//
// Arguments are the config's key=value overrides (docs/config.md), applied to the config below.
#include <fsdpp/common/exit_code.h>
#include <fsdpp/dist/world.h>
#include <fsdpp/train/custom_model.h>
#include <torch/torch.h>

#include <cstdio>

#include "regression.h"

// One residual block: an FSDP unit, checkpointed with training.gradient_checkpointing; whole on
// every tensor-parallel rank (its forward is its own).
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t dim) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc = register_module("fc", torch::nn::Linear(dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc(torch::gelu(norm(x))); }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResidualBlock);

// fsdpp::exit_code_of: a configuration error exits 2, which fsdpp-run does not restart (the same
// refusal would come again); anything else 1.
int main(int argc, char** argv) {
  return fsdpp::exit_code_of([&] {
    auto world = fsdpp::dist::init_from_env();  // RANK, WORLD_SIZE, ... from fsdpp-run
    // regression.h: the first example's config, the pipeline's microbatches of 4 examples.
    auto cfg = example_config("out/sequential", "parallelism: {pipeline_parallel_microbatch_size: 4}\n",
                              argc, argv);

    using fsdpp::tp::ParallelStyle;
    auto model = fsdpp::train::sequential_model(
        [] {
          return torch::nn::Sequential(torch::nn::Linear(16, 64),    // 0
                                       torch::nn::GELU(),            // 1
                                       ResidualBlock(64),            // 2
                                       torch::nn::Linear(64, 256),   // 3: output features split
                                       torch::nn::GELU(),            // 4
                                       torch::nn::Linear(256, 64),   // 5: input features split
                                       ResidualBlock(64),            // 6
                                       torch::nn::Linear(64, 4));    // 7
        },
        {.name = "sequential-regressor",
         .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); },
         .tensor_parallel = {{"3", ParallelStyle::COLWISE}, {"5", ParallelStyle::ROWWISE}},
         .blocks = {"ResidualBlock"}});
    return train_on_regression(cfg, world, model);  // regression.h
  });
}
