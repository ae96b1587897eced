// Checkpoints of tensor-parallel models move between layouts bit for bit: a Llama trained under
// TP 2 x FSDP 2 (its parameters and AdamW state cut along dim 0 and dim 1 by TP, then along dim
// 0 by FSDP) is saved SHARDED and FULL, loaded into FSDP 4, TP 4, one process and a fresh TP 2 x
// FSDP 2, and back from TP 4 and from one process. The check for every layout: a FULL save of
// what it loaded holds, tensor by tensor, exactly the bytes of the source's FULL save
// (parameters, every optimizer state and step).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <cstdlib>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "fsdpp/tp/plan.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

models::LlamaConfig tiny_llama(uint64_t seed) {
  return fsdpp::test::uneven_llama(/*n_layers=*/2, /*max_seq_len=*/32, seed);
}

enum class Layout { kTp2Fsdp2, kFsdp4, kTp4, kOneProcess };

const char* name_of(Layout l) {
  switch (l) {
    case Layout::kTp2Fsdp2: return "TP 2 x FSDP 2";
    case Layout::kFsdp4: return "FSDP 4";
    case Layout::kTp4: return "TP 4";
    case Layout::kOneProcess: return "one process";
  }
  return "?";
}

// A model in one layout, with its optimizer and the group its state dicts are collective over.
struct Placed {
  models::Llama model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
  tp::GroupPtr dp;     // the data-parallel ranks (each takes its part of the batch)
  tp::GroupPtr state;  // the world, or this rank alone for one process
};

Placed place(Layout layout, uint64_t seed) {
  auto& w = test::world();
  Placed p;
  p.model = models::Llama(tiny_llama(seed));
  std::shared_ptr<dist::DeviceMesh> mesh;
  FullyShardOptions o;
  p.state = w.group();
  switch (layout) {
    case Layout::kTp2Fsdp2: mesh = w.init_device_mesh({2, 2}, {"dp_shard", "tp"}); break;
    case Layout::kTp4: mesh = w.init_device_mesh({1, 4}, {"dp_shard", "tp"}); break;
    case Layout::kFsdp4: mesh = w.init_device_mesh({4, 1}, {"dp_shard", "tp"}); break;
    case Layout::kOneProcess:
      mesh = w.init_device_mesh({4, 1}, {"ranks", "dp_shard"});
      p.state = mesh->group("dp_shard");
      break;
  }
  o.mesh = mesh->sub({"dp_shard"});
  p.dp = mesh->group("dp_shard");
  if (layout == Layout::kTp2Fsdp2 || layout == Layout::kTp4) {
    auto tpi = models::parallelize_llama(*p.model, mesh->group("tp"));
    o.outer_layout = tpi.outer_layout(*p.model);
  }
  for (size_t i = 0; i < p.model->layers->size(); ++i) {
    fully_shard(*p.model->layers->ptr<models::TransformerBlockImpl>(i), o);
  }
  fully_shard(p.model, o);
  p.opt = std::make_unique<torch::optim::AdamW>(p.model->parameters(),
                                                torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  return p;
}

// Three steps on a global batch of 4 sequences, each data-parallel rank taking its part (all
// of it without `dp`).
void train(Placed& p, int steps) {
  const int64_t global_batch = 4;
  const int64_t local = p.dp ? global_batch / p.dp->size() : global_batch;
  const int64_t first = p.dp ? p.dp->rank() * local : 0;
  for (int s = 0; s < steps; ++s) {
    auto t = torch::randint(0, 61, {global_batch, 17},
                            at::make_generator<at::CPUGeneratorImpl>(300 + s));
    auto x = t.narrow(1, 0, 16).narrow(0, first, local);
    auto y = t.narrow(1, 1, 16).narrow(0, first, local);
    (p.dp ? fsdpp::forward(p.model, x, y) : p.model->forward(x, y)).loss.backward();
    p.opt->step();
    p.opt->zero_grad();
  }
}

fs::path scratch(const std::string& what, int owner = -1) {
  return test::scratch_dir("fsdpp_tp_state", what, owner);
}

}  // namespace

TEST(TensorParallelState, CheckpointsMoveBetweenLayoutsBitForBit) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  // The source: TP 2 x FSDP 2, trained so that every parameter has AdamW state.
  auto src = place(Layout::kTp2Fsdp2, 3);
  train(src, 3);
  const auto sharded = scratch("src_sharded"), full = scratch("src_full");
  state::save_state_dict(sharded, *src.model, src.opt.get(), src.state, {.type = state::StateDictType::SHARDED});
  state::save_state_dict(full, *src.model, src.opt.get(), src.state, {.type = state::StateDictType::FULL});
  const auto want = test::read_full_checkpoint(full);
  ASSERT_GT(want.size(), 30u);

  // The FULL file is the model, not only self-consistent: the same 3 steps on one process, on
  // the whole batch, give the same parameters (to rounding: the split matmuls sum differently).
  {
    Placed ref;
    ref.model = models::Llama(tiny_llama(3));
    ref.opt = std::make_unique<torch::optim::AdamW>(ref.model->parameters(),
                                                    torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    ref.dp = ref.state = nullptr;
    train(ref, 3);
    for (const auto& pr : ref.model->named_parameters()) {
      const auto key = "model.safetensors:" + pr.key();
      ASSERT_TRUE(want.count(key)) << key;
      EXPECT_LT((want.at(key) - pr.value()).abs().max().item<double>(), 1e-5) << key;
    }
  }

  for (Layout to : {Layout::kFsdp4, Layout::kTp4, Layout::kOneProcess, Layout::kTp2Fsdp2}) {
    for (const auto& from : {sharded, full}) {
      const std::string what = std::string(name_of(to)) + " from " + from.filename().string();
      auto dst = place(to, 77);
      state::load_state_dict(from, *dst.model, dst.opt.get(), dst.state);
      const auto out = scratch("full_" + std::to_string(static_cast<int>(to)) + "_" +
                                   from.filename().string(),
                               to == Layout::kOneProcess ? w.rank() : -1);
      state::save_state_dict(out, *dst.model, dst.opt.get(), dst.state, {.type = state::StateDictType::FULL});
      test::expect_same_full_checkpoint(want, out, what);
    }
  }

  // And back: TP 4 and one process save SHARDED, TP 2 x FSDP 2 loads it.
  for (Layout via : {Layout::kTp4, Layout::kOneProcess}) {
    auto mid = place(via, 77);
    state::load_state_dict(sharded, *mid.model, mid.opt.get(), mid.state);
    // One process saves alone, on every rank; every rank then loads rank 0's.
    const bool alone = via == Layout::kOneProcess;
    const std::string name = "via_" + std::to_string(static_cast<int>(via));
    state::save_state_dict(scratch(name, alone ? w.rank() : -1), *mid.model, mid.opt.get(), mid.state,
                           {.type = state::StateDictType::SHARDED});
    w.group()->barrier();
    const auto shared = scratch(name, alone ? 0 : -1);
    auto back = place(Layout::kTp2Fsdp2, 5);
    state::load_state_dict(shared, *back.model, back.opt.get(), back.state);
    const auto check = scratch("back_" + std::to_string(static_cast<int>(via)));
    state::save_state_dict(check, *back.model, back.opt.get(), back.state, {.type = state::StateDictType::FULL});
    test::expect_same_full_checkpoint(want, check, std::string("TP 2 x FSDP 2 back from ") + name_of(via));
  }
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(scratch(""));
  state::remove_tree(scratch("", w.rank()));
}
