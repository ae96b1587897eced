// fsdpp's trainer for a model of your own (docs/custom-models.md): a residual MLP regressor on
// generated data, trained by fsdpp::train::train with everything fsdpp-train has (sharding from
// the config, checkpoints and resume, metrics.jsonl, evaluation, schedules, clipping).
//
//   build/bin/fsdpp-run --nproc-per-node 2 build/bin/fsdpp-example-mlp \
//       training.output_dir=/tmp/mlp training.max_steps=40
//
// Arguments are the config's key=value overrides (docs/config.md), applied to the config below.
#include <fsdpp/common/exit_code.h>
#include <fsdpp/dist/world.h>
#include <fsdpp/fsdp/fully_shard.h>
#include <fsdpp/train/custom_model.h>
#include <torch/torch.h>

#include <cstdio>

#include "regression.h"

// One residual block: the unit FSDP shards and activation checkpointing recomputes.
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t dim) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc1 = register_module("fc1", torch::nn::Linear(dim, 4 * dim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc2(torch::gelu(fc1(norm(x)))); }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(ResidualBlock);

struct RegressorImpl : torch::nn::Module {
  RegressorImpl(int64_t in, int64_t dim, int64_t out, int64_t depth) {
    embed = register_module("embed", torch::nn::Linear(in, dim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(ResidualBlock(dim));
    head = register_module("head", torch::nn::Linear(dim, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = embed(x);
    for (size_t i = 0; i < blocks->size(); ++i) {
      h = fsdpp::forward(blocks->ptr<ResidualBlockImpl>(i), h);  // a unit: gathered, run, freed
    }
    return head(h);
  }
  torch::nn::Linear embed{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};

// fsdpp::exit_code_of: a configuration error exits 2, which fsdpp-run does not restart (the same
// refusal would come again); anything else 1.
int main(int argc, char** argv) {
  return fsdpp::exit_code_of([&] {
    auto world = fsdpp::dist::init_from_env();  // RANK, WORLD_SIZE, ... from fsdpp-run
    auto cfg = example_config("out/mlp", "", argc, argv);  // regression.h

    fsdpp::train::CustomModel model;
    model.name = "mlp-regressor";
    model.make = [] { return std::make_shared<RegressorImpl>(16, 64, 4, 4); };
    model.blocks = {"ResidualBlock"};  // one FSDP unit each; checkpointed with gradient_checkpointing
    model.loss = [](torch::nn::Module& m, const fsdpp::train::Batch& batch) {
      auto& net = static_cast<RegressorImpl&>(m);
      return torch::mse_loss(fsdpp::forward(net, batch.inputs), batch.targets);
    };
    return train_on_regression(cfg, world, model);  // regression.h
  });
}
