// Checkpoints of pipelined models move between layouts bit for bit: a Llama trained under
// pp 2 x FSDP 2 (each pp rank holding its stages, each stage sharded over its dp pair) is saved
// SHARDED and FULL through state's parts API (each rank its stages), loaded into pp 4, FSDP 4,
// one process and a fresh pp 2 x FSDP 2, and back from pp 4, FSDP 4 and one process. The check
// for every layout: a FULL save of what it loaded holds, tensor by tensor, exactly the bytes of
// the source's FULL save (parameters, every AdamW state and step). The source's FULL file is
// also the model one process trains on the same batches (within 1e-5).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/pipeline/runtime.h"
#include "fsdpp/pipeline/schedules.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;
namespace pl = fsdpp::pipeline;

namespace {

// 2 layers, 4 units: 2 stages of 2 on pp 2, 4 of 1 on pp 4.
models::LlamaConfig tiny_llama(uint64_t seed) {
  return fsdpp::test::uneven_llama(/*n_layers=*/2, /*max_seq_len=*/16, seed);
}

enum class Layout { kPp2Fsdp2, kPp4, kFsdp4, kOneProcess };

const char* name_of(Layout l) {
  switch (l) {
    case Layout::kPp2Fsdp2: return "pp 2 x FSDP 2";
    case Layout::kPp4: return "pp 4";
    case Layout::kFsdp4: return "FSDP 4";
    case Layout::kOneProcess: return "one process";
  }
  return "?";
}

// A model in one layout: the parts this rank holds (its stages, or the whole model), their
// optimizer and the group state dicts are collective over.
struct Placed {
  models::Llama model{nullptr};
  std::vector<models::LlamaStage> stages;
  std::vector<torch::nn::Module*> parts;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::shared_ptr<dist::DeviceMesh> mesh;
  std::unique_ptr<pl::PipelineRuntime> runtime;
  std::shared_ptr<dist::ProcessGroup> state;  // the world, or this rank alone for one process
};

Placed place(Layout layout, uint64_t seed) {
  auto& w = test::world();
  Placed p;
  p.model = models::Llama(tiny_llama(seed));
  p.state = w.group();
  if (layout == Layout::kFsdp4 || layout == Layout::kOneProcess) {
    FullyShardOptions o;
    o.mesh = w.mesh();
    if (layout == Layout::kOneProcess) {
      p.mesh = w.init_device_mesh({4, 1}, {"ranks", "dp_shard"});
      p.state = p.mesh->group("dp_shard");
      o.mesh = p.mesh->sub({"dp_shard"});
    }
    for (size_t i = 0; i < p.model->layers->size(); ++i) {
      fully_shard(*p.model->layers->ptr<models::TransformerBlockImpl>(i), o);
    }
    fully_shard(p.model, o);
    p.parts = {p.model.ptr().get()};
    p.opt = std::make_unique<torch::optim::AdamW>(p.model->parameters(),
                                                  torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    return p;
  }
  const int pp = layout == Layout::kPp4 ? 4 : 2;
  p.mesh = w.init_device_mesh({pp, 4 / pp}, {"pp", "dp_shard"});
  FullyShardOptions o;
  o.mesh = p.mesh->sub({"dp_shard"});
  auto sched = pl::make_schedule("1F1B", pp, /*microbatches=*/2);
  auto all = models::split_llama(p.model, models::even_units_per_stage(4, pp));
  std::vector<pl::PipelineStage> mine;
  for (int s : sched.stages_of(p.mesh->group("pp")->rank())) {
    auto st = all[static_cast<size_t>(s)];
    for (auto& b : st->blocks) fully_shard(*b, o);
    fully_shard(*st, o);
    p.stages.push_back(st);
    p.parts.push_back(st.ptr().get());
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
    if (s == sched.num_stages - 1) loss = [st](auto& logits, auto& t) { return st->loss(logits, t); };
    mine.push_back(pl::make_stage(s, st, loss));
  }
  p.runtime = std::make_unique<pl::PipelineRuntime>(sched, std::move(mine), p.mesh->group("pp"));
  p.opt = std::make_unique<torch::optim::AdamW>(p.runtime->parameters(),
                                                torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  return p;
}

at::Tensor tokens(int step) {
  return torch::randint(0, 61, {4, 17}, at::make_generator<at::CPUGeneratorImpl>(300 + step));
}

// RoPE's tables are derived, not saved (as fsdpp-train saves): a stage holds only its blocks',
// and state saves the buffers from rank 0.
state::SaveOptions save_options(state::StateDictType type) {
  state::SaveOptions o;
  o.type = type;
  o.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
  return o;
}

state::LoadOptions load_options() {
  state::LoadOptions o;
  o.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
  return o;
}

fs::path scratch(const std::string& what, int owner = -1) {
  return test::scratch_dir("fsdpp_pp_state", what, owner);
}

}  // namespace

TEST(PipelineState, CheckpointsMoveBetweenLayoutsBitForBit) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  // The source: pp 2 x FSDP 2, three steps of a global batch of 4 (2 per dp rank, microbatches
  // of 1), so that every parameter has AdamW state.
  auto src = place(Layout::kPp2Fsdp2, 3);
  const auto dp = src.mesh->group("dp_shard");
  for (int s = 0; s < 3; ++s) {
    auto t = tokens(s).narrow(0, 2 * dp->rank(), 2);
    src.runtime->step(t.narrow(1, 0, 16), t.narrow(1, 1, 16));
    src.opt->step();
    src.opt->zero_grad();
  }
  const auto sharded = scratch("src_sharded"), full = scratch("src_full");
  state::save_state_dict(sharded, src.parts, src.opt.get(), src.state, save_options(state::StateDictType::SHARDED));
  state::save_state_dict(full, src.parts, src.opt.get(), src.state, save_options(state::StateDictType::FULL));
  const auto want = test::read_full_checkpoint(full);
  // 2 blocks of 9 tensors, embedding, norm, output: 21 parameters, each with 2 AdamW states
  // and a step.
  ASSERT_EQ(want.size(), 21u * 4);
  {
    models::Llama ref(tiny_llama(3));
    torch::optim::AdamW opt(ref->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    for (int s = 0; s < 3; ++s) {
      auto t = tokens(s);
      ref->forward(t.narrow(1, 0, 16), t.narrow(1, 1, 16)).loss.backward();
      opt.step();
      opt.zero_grad();
    }
    for (const auto& pr : ref->named_parameters()) {
      const auto key = "model.safetensors:" + pr.key();
      ASSERT_TRUE(want.count(key)) << key;
      EXPECT_LT((want.at(key) - pr.value()).abs().max().item<double>(), 1e-5) << key;
    }
  }
  for (Layout to : {Layout::kPp4, Layout::kFsdp4, Layout::kOneProcess, Layout::kPp2Fsdp2}) {
    for (const auto& from : {sharded, full}) {
      const std::string what = std::string(name_of(to)) + " from " + from.filename().string();
      auto dst = place(to, 77);
      state::load_state_dict(from, dst.parts, dst.opt.get(), dst.state, load_options());
      const auto out = scratch("full_" + std::to_string(static_cast<int>(to)) + "_" +
                                   from.filename().string(),
                               to == Layout::kOneProcess ? w.rank() : -1);
      state::save_state_dict(out, dst.parts, dst.opt.get(), dst.state, save_options(state::StateDictType::FULL));
      test::expect_same_full_checkpoint(want, out, what);
    }
  }
  // And back: pp 4, FSDP 4 and one process save SHARDED, pp 2 x FSDP 2 loads it.
  for (Layout via : {Layout::kPp4, Layout::kFsdp4, Layout::kOneProcess}) {
    auto mid = place(via, 77);
    state::load_state_dict(sharded, mid.parts, mid.opt.get(), mid.state, load_options());
    const bool alone = via == Layout::kOneProcess;  // saves alone on every rank; all load rank 0's
    const std::string name = "via_" + std::to_string(static_cast<int>(via));
    state::save_state_dict(scratch(name, alone ? w.rank() : -1), mid.parts, mid.opt.get(), mid.state,
                           save_options(state::StateDictType::SHARDED));
    w.group()->barrier();
    auto back = place(Layout::kPp2Fsdp2, 5);
    state::load_state_dict(scratch(name, alone ? 0 : -1), back.parts, back.opt.get(), back.state, load_options());
    const auto check = scratch("back_" + std::to_string(static_cast<int>(via)));
    state::save_state_dict(check, back.parts, back.opt.get(), back.state, save_options(state::StateDictType::FULL));
    test::expect_same_full_checkpoint(want, check, std::string("pp 2 x FSDP 2 back from ") + name_of(via));
  }
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(scratch(""));
  state::remove_tree(scratch("", w.rank()));
}
