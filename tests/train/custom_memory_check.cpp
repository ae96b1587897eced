// fsdpp::train::train's memory check on a module of its own (train.custom_memory_check): a
// residual MLP of DIM x DEPTH blocks (argv[1], argv[2]), the rest of argv the config's overrides.
// Prints "params N" (the module's own count, for the test to compare with the check's figures)
// on rank 0, then trains.
#include <fsdpp/dist/world.h>
#include <fsdpp/fsdp/fully_shard.h>
#include <fsdpp/train/custom_model.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

struct WideBlockImpl : torch::nn::Module {
  explicit WideBlockImpl(int64_t dim) {
    fc1 = register_module("fc1", torch::nn::Linear(dim, 4 * dim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(WideBlock);

struct WideNetImpl : torch::nn::Module {
  WideNetImpl(int64_t dim, int64_t depth) {
    embed = register_module("embed", torch::nn::Linear(8, dim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(WideBlock(dim));
    head = register_module("head", torch::nn::Linear(dim, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = embed(x);
    for (size_t i = 0; i < blocks->size(); ++i) h = fsdpp::forward(blocks->ptr<WideBlockImpl>(i), h);
    return head(h);
  }
  torch::nn::Linear embed{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: custom_memory_check DIM DEPTH [key=value ...]\n");
    return 2;
  }
  const int64_t dim = std::stoll(argv[1]), depth = std::stoll(argv[2]);
  auto world = fsdpp::dist::init_from_env();
  const std::vector<std::string> overrides(argv + 3, argv + argc);
  auto cfg = fsdpp::train::custom_config(
      "training:\n  max_steps: 1\n  per_device_train_batch_size: 4\n  save_strategy: 'no'\n"
      "  report_to: none\n",
      overrides);
  fsdpp::train::CustomModel model;
  model.name = "wide";
  model.make = [&] {
    auto net = std::make_shared<WideNetImpl>(dim, depth);
    int64_t n = 0;
    for (const auto& p : net->parameters()) n += p.numel();
    if (world->rank() == 0) std::printf("params %lld\n", static_cast<long long>(n));
    std::fflush(stdout);
    return net;
  };
  model.blocks = {"WideBlock"};
  model.loss = [](torch::nn::Module& m, const fsdpp::train::Batch& b) {
    return torch::mse_loss(fsdpp::forward(static_cast<WideNetImpl&>(m), b.inputs), b.targets);
  };
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto x = torch::randn({64, 8}, gen);
  auto y = torch::randn({64, 1}, gen);
  auto r = fsdpp::train::train(cfg, world, model, fsdpp::train::tensor_data(x, y));
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
