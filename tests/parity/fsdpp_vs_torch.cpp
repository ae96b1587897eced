// The fsdpp side of the comparison with PyTorch's own FSDP (tests/parity/torch_fsdp.py): the
// same model, initial weights (read from the file torch wrote) and batches, FULL_SHARD on the
// ranks fsdpp-run starts; writes the global loss of every step.
#include <torch/torch.h>

#include <fstream>
#include <iterator>

#include "../support/test_models.h"
#include "fsdpp/dist/world.h"

namespace {
c10::IValue load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes);
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string dir = argv[1];
  auto world = fsdpp::dist::init_from_env();
  fsdpp::test::TinyTransformer model(29, 16, 2, 2);
  {
    torch::NoGradGuard no_grad;
    auto init = load(dir + "/init.pt").toGenericDict();
    auto params = model->named_parameters();
    for (const auto& kv : init) {
      const auto name = kv.key().toStringRef();
      auto* p = params.find(name);
      if (!p) throw std::runtime_error("no parameter " + name);
      p->copy_(kv.value().toTensor());
    }
    if (static_cast<size_t>(init.size()) != params.size()) throw std::runtime_error("parameter count");
  }
  fsdpp::FullyShardOptions opts;
  opts.mesh = world->mesh();
  model->shard(opts);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  auto tokens = load(dir + "/batches.pt").toGenericDict().at("tokens").toTensor();
  const int64_t steps = tokens.size(0), batch = tokens.size(1), seq = tokens.size(2) - 1;
  const int64_t local = batch / world->size();
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    auto t = tokens[step].narrow(0, world->rank() * local, local);
    auto logits = fsdpp::forward(model, t.narrow(1, 0, seq));
    auto loss = torch::cross_entropy_loss(logits.reshape({-1, 29}), t.narrow(1, 1, seq).reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    auto global = loss.detach().clone().reshape({1});
    world->group()->all_reduce(global, fsdpp::dist::ReduceOp::SUM);
    losses.push_back(global.item<double>() / world->size());
  }
  if (world->rank() == 0) {
    std::ofstream out(dir + "/fsdpp_losses.json");
    out.precision(17);
    out << "[";
    for (size_t i = 0; i < losses.size(); ++i) out << (i ? ", " : "") << losses[i];
    out << "]\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
