// A small FSDP job that goes wrong on purpose, for tests/faults/collective_mismatch.sh.
//   mismatch_driver skip-unit   step 2: rank 1 skips unit 'layers.1' in its forward
//   mismatch_driver reorder     step 2: rank 1 runs units 'layers.2' and 'layers.1' swapped
//   mismatch_driver hang        step 2: rank 1 stops issuing collectives (sleeps)
//   mismatch_driver bench N     N one-element all-reduces; prints the mean time of one (what
//                               FSDPP_COLLECTIVE_CHECK=1 adds is the difference)
// Three equal Linear units and a root head, FULL_SHARD over every rank. Each rank prints
// "[driver] rank R caught after S s: MESSAGE" for the error it got, and exits 1.
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/fully_shard.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    for (int i = 0; i < 3; ++i) {
      lin.emplace_back(16, 16);
      layers->push_back(lin.back());
    }
    register_module("layers", layers);
    head = register_module("head", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int>& order) {
    auto h = x;
    for (int i : order) h = torch::tanh(fsdpp::forward(lin[i], h));
    return head(h).sum();
  }
  torch::nn::ModuleList layers;
  std::vector<torch::nn::Linear> lin;  // the same modules, typed
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "skip-unit" && mode != "reorder" && mode != "hang" && mode != "bench") {
    std::fprintf(stderr, "usage: mismatch_driver skip-unit|reorder|hang|bench N\n");
    return 2;
  }
  auto world = fsdpp::dist::init_from_env();
  if (mode == "bench") {
    const int n = argc > 2 ? std::stoi(argv[2]) : 1000;
    auto t = torch::ones({1});
    for (int i = 0; i < 50; ++i) world->group()->all_reduce(t, fsdpp::dist::ReduceOp::SUM, {"warmup"});
    const auto b0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) world->group()->all_reduce(t, fsdpp::dist::ReduceOp::SUM, {"bench"});
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - b0).count() / n;
    if (world->rank() == 0) std::printf("[driver] %d all-reduces of 4 B: %.1f us each\n", n, us);
    return 0;
  }
  torch::manual_seed(0);
  Net net;
  fsdpp::FullyShardOptions o;
  o.mesh = world->mesh();
  for (auto& layer : net->lin) fsdpp::fully_shard(layer, o);
  fsdpp::fully_shard(*net, o);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int step = 1; step <= 3; ++step) {
      std::vector<int> order{0, 1, 2};
      if (step == 2 && world->rank() == 1) {
        if (mode == "skip-unit") order = {0, 2};
        if (mode == "reorder") order = {0, 2, 1};
        if (mode == "hang") {
          std::fprintf(stderr, "[driver] rank 1 stops issuing collectives\n");
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
      }
      fsdpp::forward(net, torch::ones({4, 16}), order).backward();
    }
  } catch (const fsdpp::Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[driver] rank %d caught after %.2f s: %s\n", world->rank(), s, e.what());
    std::fflush(stderr);
    return 1;
  }
  std::printf("[driver] rank %d finished without an error\n", world->rank());
  return 0;
}
