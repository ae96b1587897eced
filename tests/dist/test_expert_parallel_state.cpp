// Checkpoints of expert-parallel Qwen3-MoE move between layouts bit for bit: trained under EP 2
// x FSDP 2 (the experts cut along dim 0 by EP, then along dim 0 by FSDP over the ranks that
// hold the same experts; the rest FSDP over all 4 ranks), saved SHARDED and FULL, loaded into
// one process, EP 4 and FSDP 4, and back from one process. The check for every layout: a FULL
// save of what it loaded holds, tensor by tensor, exactly the bytes of the source's FULL save
// (parameters, every AdamW state and step).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

namespace fs = std::filesystem;

// The model of test_expert_parallel.cpp: hidden 32, 2 sparse layers of 8 experts, top-2.
models::Qwen3MoeConfig tiny_moe(uint64_t seed) { return fsdpp::test::routed_moe(seed); }

fs::path scratch(const std::string& what, int owner = -1) {
  return test::scratch_dir("fsdpp_ep_state", what, owner);
}

}  // namespace

namespace {

enum class Layout { kEp2Fsdp2, kEp4, kFsdp4, kOneProcess };

const char* name_of(Layout l) {
  switch (l) {
    case Layout::kEp2Fsdp2: return "EP 2 x FSDP 2";
    case Layout::kEp4: return "EP 4";
    case Layout::kFsdp4: return "FSDP 4";
    case Layout::kOneProcess: return "one process";
  }
  return "?";
}

// A model in one layout, its optimizer, the data-parallel group and the group its state dicts
// are collective over (the world, or this rank alone for one process).
struct Placed {
  models::Qwen3Moe model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
  moe::GroupPtr dp, state;
};

Placed place(Layout layout, uint64_t seed) {
  auto& w = test::world();
  Placed p;
  p.model = models::Qwen3Moe(tiny_moe(seed));
  p.dp = p.state = w.group();
  if (layout == Layout::kEp2Fsdp2 || layout == Layout::kEp4) {
    auto mesh = layout == Layout::kEp4 ? w.init_device_mesh({1, 4}, {"efsdp", "ep"})
                                       : w.init_device_mesh({2, 2}, {"efsdp", "ep"});
    auto ep = models::parallelize_qwen3_moe_experts(*p.model, {.ep = mesh->group("ep"),
                                                               .batch = w.group()});
    FullyShardOptions dense;
    dense.mesh = w.mesh();
    models::fully_shard_qwen3_moe(*p.model, ep, dense, mesh->sub({"efsdp"}));
  } else {
    FullyShardOptions o;
    o.mesh = w.mesh();
    if (layout == Layout::kOneProcess) {
      auto alone = w.init_device_mesh({4, 1}, {"ranks", "one"});
      o.mesh = alone->sub({"one"});
      p.dp = p.state = alone->group("one");
    }
    for (size_t i = 0; i < p.model->layers->size(); ++i) {
      fully_shard(*p.model->layers->ptr<models::Qwen3MoeDecoderLayerImpl>(i), o);
    }
    fully_shard(p.model, o);
  }
  p.opt = std::make_unique<torch::optim::AdamW>(
      p.model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  return p;
}

}  // namespace

// An EP 2 x FSDP 2 run's checkpoints (SHARDED and FULL) hold the whole model: the FULL file has
// every expert tensor at (E, ...), equal to the experts gathered from the ranks, and both load
// into one process, EP 4 and FSDP 4 bit for bit (parameters and AdamW state: a FULL save of
// what each loaded is the source's FULL save, tensor by tensor); and back, from one process's
// SHARDED save into EP 2 x FSDP 2.
TEST(ExpertParallelState, CheckpointsMoveBetweenLayoutsBitForBit) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  const auto cfg = tiny_moe(11);
  auto src = place(Layout::kEp2Fsdp2, cfg.seed);
  for (int s = 0; s < 3; ++s) {  // each rank one of 4 sequences
    auto t = torch::randint(0, cfg.vocab_size, {4, 17},
                            at::make_generator<at::CPUGeneratorImpl>(100 + s));
    auto x = t.narrow(1, 0, 16).narrow(0, w.rank(), 1);
    auto y = t.narrow(1, 1, 16).narrow(0, w.rank(), 1);
    fsdpp::forward(src.model, x, y, /*output_router_logits=*/true).loss.backward();
    src.opt->step();
    src.opt->zero_grad();
  }
  const auto sharded = scratch("sharded"), full = scratch("full");
  state::save_state_dict(sharded, *src.model, src.opt.get(), src.state,
                         {.type = state::StateDictType::SHARDED});
  state::save_state_dict(full, *src.model, src.opt.get(), src.state,
                         {.type = state::StateDictType::FULL});
  const auto want = test::read_full_checkpoint(full);
  EXPECT_EQ(want.at("model.safetensors:layers.0.mlp.experts.gate_proj").size(0), cfg.num_experts);
  for (const auto& [name, t] : fsdpp::full_parameters(*src.model)) {
    const auto key = "model.safetensors:" + name;
    ASSERT_TRUE(want.count(key)) << key;
    EXPECT_TRUE(want.at(key).sizes() == t.sizes() && at::equal(want.at(key), t)) << key;
  }
  for (Layout to : {Layout::kOneProcess, Layout::kEp4, Layout::kFsdp4}) {
    for (const auto& from : {sharded, full}) {
      const std::string what = std::string(name_of(to)) + " from " + from.filename().string();
      auto dst = place(to, 77);
      state::load_state_dict(from, *dst.model, dst.opt.get(), dst.state);
      const auto out = scratch("full_" + std::to_string(static_cast<int>(to)) + "_" +
                                   from.filename().string(),
                               to == Layout::kOneProcess ? w.rank() : -1);
      state::save_state_dict(out, *dst.model, dst.opt.get(), dst.state,
                             {.type = state::StateDictType::FULL});
      test::expect_same_full_checkpoint(want, out, what);
    }
  }
  {  // And back: one process saves SHARDED (every rank alone), EP 2 x FSDP 2 loads rank 0's.
    auto one = place(Layout::kOneProcess, 77);
    state::load_state_dict(sharded, *one.model, one.opt.get(), one.state);
    state::save_state_dict(scratch("via_one", w.rank()), *one.model, one.opt.get(), one.state,
                           {.type = state::StateDictType::SHARDED});
    w.group()->barrier();
    auto back = place(Layout::kEp2Fsdp2, 5);
    state::load_state_dict(scratch("via_one", 0), *back.model, back.opt.get(), back.state);
    const auto check = scratch("back");
    state::save_state_dict(check, *back.model, back.opt.get(), back.state,
                           {.type = state::StateDictType::FULL});
    test::expect_same_full_checkpoint(want, check, "EP 2 x FSDP 2 back from one process");
  }
  if (w.rank() == 0) {
    std::printf("[ep state] EP 2 x FSDP 2 -> one process, EP 4, FSDP 4 and one process -> EP 2 "
                "x FSDP 2: %zu tensors (parameters and AdamW state) bit for bit\n", want.size());
  }
}
