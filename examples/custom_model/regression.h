#pragma once
// What fsdpp's two custom-model examples share (main.cpp, sequential.cpp): the regression data,
// the training config they start from, and the run.
#include <fsdpp/dist/world.h>
#include <fsdpp/train/custom_model.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// The data: y = sin(x A) B + noise, one function (A and B from seed 0), examples x drawn from
// `seed`: the same on every rank.
inline std::pair<torch::Tensor, torch::Tensor> make_data(int64_t n, uint64_t seed) {
  auto fn = at::make_generator<at::CPUGeneratorImpl>(0);
  auto a = torch::randn({16, 32}, fn) / 4;
  auto b = torch::randn({32, 4}, fn) / 4;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = torch::randn({n, 16}, gen);
  auto y = torch::sin(x.matmul(a)).matmul(b) + 0.01 * torch::randn({n, 4}, gen);
  return {x, y};
}

// Trains `model` on 2048 examples, evaluating on 256 more; rank 0 prints the result. The exit
// status: 0, or 128 + the signal that stopped the run.
inline int train_on_regression(const fsdpp::train::TrainConfig& cfg,
                               const std::shared_ptr<fsdpp::dist::World>& world,
                               const fsdpp::train::CustomModel& model) {
  auto [x, y] = make_data(2048, 1);
  auto [x_val, y_val] = make_data(256, 2);
  auto result = fsdpp::train::train(cfg, world, model, fsdpp::train::tensor_data(x, y, x_val, y_val));
  if (world->rank() == 0) {
    std::printf("done: %lld steps, final loss %.6f, validation loss %.6f, output in %s\n",
                static_cast<long long>(result.steps), result.final_loss, result.final_val_loss,
                result.output_dir.c_str());
  }
  return result.stopped_by_signal ? 128 + result.stopped_by_signal : 0;
}

// The examples' config (`extra`: YAML sections of their own), then the command line's
// key=value overrides (docs/config.md).
inline fsdpp::train::TrainConfig example_config(const std::string& output_dir, const std::string& extra,
                                                int argc, char** argv) {
  return fsdpp::train::custom_config(R"(
training:
  output_dir: )" + output_dir + R"(
  fsdp: full_shard
  max_steps: 60
  per_device_train_batch_size: 16
  learning_rate: 0.003
  warmup_steps: 5
  lr_scheduler_type: cosine
  logging_steps: 10
  eval_steps: 20
  save_steps: 20
)" + extra, std::vector<std::string>(argv + 1, argv + argc));
}
