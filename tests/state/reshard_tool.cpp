// Resharding across world sizes, in two runs (started by run_reshard.sh through fsdpp-run):
//
//   fsdpp_reshard_tool save DIR    trains 3 steps on the global batch split by rank, saves
//                                  DIR/ckpt (SHARDED), DIR/full (FULL: the expected values)
//                                  and DIR/local (LOCAL)
//   fsdpp_reshard_tool check DIR [NAME]
//                                  on another number of ranks: loads DIR/NAME (default ckpt),
//                                  checks the parameters and the AdamW state against DIR/full
//                                  bit for bit, checks that DIR/local is refused, trains one more
//                                  step and compares with a single-process model started from
//                                  DIR/full
//   fsdpp_reshard_tool compare DIR A B
//                                  loads DIR/A, then DIR/B, into the same sharded model and
//                                  AdamW: every rank's parameter shards and optimizer state must
//                                  be equal bit for bit (an offline reshard against reshard-on-load)
//
// Exit status 0 when every check holds; each failure is printed with the rank.
#include <torch/torch.h>

#include <cstdio>
#include <map>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "../support/test_models.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4 ranks
constexpr int64_t kVocab = 29;

std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(5000 + step);
  auto tokens = torch::randint(0, kVocab, {kGlobalBatch, 8}, g);
  return {tokens.narrow(1, 0, 7), tokens.narrow(1, 1, 7)};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::cross_entropy_loss(logits.reshape({-1, kVocab}), y.reshape({-1}));
}

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(1e-2).weight_decay(0.1); }

int failures = 0;
void fail(int rank, const std::string& msg) {
  std::fprintf(stderr, "[reshard_tool] rank %d: FAIL %s\n", rank, msg.c_str());
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (!((mode == "save" && argc == 3) || (mode == "check" && (argc == 3 || argc == 4)) ||
        (mode == "compare" && argc == 5))) {
    std::fprintf(stderr, "usage: %s save DIR | check DIR [NAME] | compare DIR A B\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[2];
  const std::string ckpt_name = mode == "check" && argc == 4 ? argv[3] : "ckpt";
  try {
    auto world = dist::init_from_env();
    const int rank = world->rank(), n = world->size();
    const int64_t local = kGlobalBatch / n;
    torch::manual_seed(mode == "save" ? 7 : 1234);  // check starts from other weights
    test::TinyTransformer model(kVocab, 16, 2, 2);
    FullyShardOptions o;
    o.mesh = world->mesh();
    model->shard(o);
    torch::optim::AdamW opt(model->parameters(), adamw());
    auto step = [&](int s) {
      auto [x, y] = batch(s);
      loss_of(fsdpp::forward(model, x.narrow(0, rank * local, local)),
              y.narrow(0, rank * local, local)).backward();
      opt.step();
      opt.zero_grad();
    };

    if (mode == "save") {
      for (int s = 0; s < 3; ++s) step(s);
      state::SaveOptions so;
      state::save_state_dict(dir / "ckpt", *model, &opt, world->group(), so);
      so.type = state::StateDictType::FULL;
      state::save_state_dict(dir / "full", *model, &opt, world->group(), so);
      so.type = state::StateDictType::LOCAL;
      state::save_state_dict(dir / "local", *model, &opt, world->group(), so);
      if (rank == 0) std::printf("[reshard_tool] saved on %d ranks\n", n);
      return 0;
    }

    if (mode == "compare") {
      // Parameter shards and AdamW state (step, exp_avg, exp_avg_sq) of this rank, copied.
      auto snapshot = [&] {
        std::vector<std::pair<std::string, torch::Tensor>> out;
        for (auto& item : model->named_parameters()) {
          out.emplace_back(item.key(), item.value().detach().clone());
          auto it = opt.state().find(item.value().unsafeGetTensorImpl());
          if (it == opt.state().end()) continue;
          auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
          out.emplace_back(item.key() + ".step", torch::tensor(st.step()));
          out.emplace_back(item.key() + ".exp_avg", st.exp_avg().clone());
          out.emplace_back(item.key() + ".exp_avg_sq", st.exp_avg_sq().clone());
        }
        return out;
      };
      state::load_state_dict(dir / argv[3], *model, &opt, world->group());
      const auto a = snapshot();
      state::load_state_dict(dir / argv[4], *model, &opt, world->group());
      const auto b = snapshot();
      if (a.size() != b.size()) fail(rank, "different numbers of tensors");
      for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) {
          fail(rank, a[i].first + " differs between " + argv[3] + " and " + argv[4]);
        }
      }
      auto flag = torch::full({1}, failures ? 1.0f : 0.0f);
      world->group()->all_reduce(flag, dist::ReduceOp::MAX);
      if (rank == 0) {
        std::printf("[reshard_tool] %s and %s loaded on %d ranks: %zu tensors per rank %s\n",
                    argv[3], argv[4], n, a.size(), flag.item<float>() > 0 ? "DIFFER" : "equal bit for bit");
      }
      return flag.item<float>() > 0 ? 1 : 0;
    }

    // check
    state::load_state_dict(dir / ckpt_name, *model, &opt, world->group());
    std::map<std::string, torch::Tensor> got;
    for (auto& [name, t] : full_parameters(*model)) got[name] = t;
    auto expected = state::SafetensorsFile::open(dir / "full" / "model.safetensors");
    for (auto& [name, t] : got) {
      if (!expected.contains(name)) {
        fail(rank, "no expected value for " + name);
      } else if (!torch::equal(expected.get(name), t)) {
        fail(rank, "loaded parameter differs: " + name);
      }
    }
    // The optimizer state, gathered again through a FULL save of what was loaded.
    state::SaveOptions so;
    so.type = state::StateDictType::FULL;
    state::save_state_dict(dir / "reloaded", *model, &opt, world->group(), so);
    auto expected_optim = state::SafetensorsFile::open(dir / "full" / "optim.safetensors");
    if (rank == 0) {
      auto again = state::SafetensorsFile::open(dir / "reloaded" / "optim.safetensors");
      if (again.names().size() != expected_optim.names().size()) fail(rank, "optimizer tensor count");
      for (const auto& name : expected_optim.names()) {
        if (!again.contains(name) || !torch::equal(again.get(name), expected_optim.get(name))) {
          fail(rank, "loaded optimizer state differs: " + name);
        }
      }
    }
    // LOCAL from another world size is refused, naming both sizes.
    try {
      state::load_state_dict(dir / "local", *model, &opt, world->group());
      fail(rank, "LOCAL checkpoint loaded on another world size");
    } catch (const CheckpointError& e) {
      const std::string msg = e.what();
      if (msg.find("cannot be loaded on " + std::to_string(n) + (n == 1 ? " rank;" : " ranks;")) ==
          std::string::npos) {
        fail(rank, "unexpected LOCAL error: " + msg);
      }
    }

    // One more step, against a single-process model started from the saved state.
    step(3);
    torch::manual_seed(1);
    test::TinyTransformer ref(kVocab, 16, 2, 2);
    torch::optim::AdamW ref_opt(ref->parameters(), adamw());
    {
      torch::NoGradGuard no_grad;
      for (auto& item : ref->named_parameters()) {
        item.value().copy_(expected.get(item.key()));
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(expected_optim.get("optim." + item.key() + ".step").item<int64_t>());
        s->exp_avg(expected_optim.get("optim." + item.key() + ".exp_avg"));
        s->exp_avg_sq(expected_optim.get("optim." + item.key() + ".exp_avg_sq"));
        ref_opt.state()[item.value().unsafeGetTensorImpl()] = std::move(s);
      }
    }
    auto [x, y] = batch(3);
    loss_of(ref->forward(x), y).backward();
    ref_opt.step();
    double worst = 0;
    auto after = full_parameters(*model);
    auto ref_params = ref->named_parameters();
    for (auto& [name, t] : after) {
      const auto& e = ref_params[name];
      const double err = (t - e).abs().max().item<double>() /
                         std::max(1.0, e.abs().max().item<double>());
      worst = std::max(worst, err);
      if (err > 1e-5) fail(rank, "after one more step " + name + " differs by " + std::to_string(err));
    }
    // The checkpoint's own parameters moved: the step was real.
    if (torch::equal(after.front().second, got[after.front().first])) fail(rank, "step changed nothing");
    world->group()->barrier();
    if (rank == 0) {
      std::printf("[reshard_tool] loaded on %d ranks: %s, worst relative error after one more "
                  "step %.3g\n",
                  n, failures ? "FAILED" : "ok", worst);
    }
    auto flag = torch::full({1}, failures ? 1.0f : 0.0f);
    world->group()->all_reduce(flag, dist::ReduceOp::MAX);
    return flag.item<float>() > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[reshard_tool] %s\n", e.what());
    return 1;
  }
}
