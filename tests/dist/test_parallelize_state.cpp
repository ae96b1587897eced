// What parallelize's layouts keep and compose with (docs/parallelize.md):
//  - checkpoints: each layout trains two steps and saves SHARDED and FULL; the next layout in a
//    cycle, and one process, load the SHARDED one and save FULL, which must hold exactly the
//    source's FULL bytes (parameters and every AdamW state); one process's checkpoint loads back
//    into every layout the same way. ParallelizeStateSlow does every ordered pair of layouts.
//  - LOCAL state dicts of pipelined, tensor- and expert-parallel layouts reload into their layout;
//  - the float16 loss scaler over every rank of a PP x TP and a TP x EP layout: powers-of-two
//    scales leave training equal to one process, and one rank's inf skips the step everywhere;
//  - parameter offload and the disk-offloaded optimizer under PP x TP and TP x EP, equal to one
//    process;
//  - the combinations that stay refused, each an error that says why.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/disk_offload.h"
#include "fsdpp/state/atomic_dir.h"
#include "parallelize_cells.h"

using namespace fsdpp;
using namespace fsdpp::test::cells;
namespace fs = std::filesystem;
using SS = ShardingStrategy;

namespace {

fs::path scratch(const std::string& what, int owner = -1) {
  return test::scratch_dir("fsdpp_parallelize_state", what, owner);
}

std::vector<Layout> layouts_of(Arch a) {
  if (a == Arch::kLlama) {
    return {L("FSDP 4", {}), L("TP 2 x FSDP 2, SP", {.tp = 2}, SS::FULL_SHARD, true),
            L("PP 2 x FSDP 2, ZBV", {.pp = 2}, SS::FULL_SHARD, false, "ZBVZeroBubble"),
            L("PP 2 x TP 2, SP", {.pp = 2, .tp = 2}, SS::FULL_SHARD, true),
            L("PP 4, GPipe", {.pp = 4}, SS::FULL_SHARD, false, "GPipe"),
            L("TP 4", {.tp = 4})};
  }
  return {L("EP 2 x HSDP 2x2", {.dp_replicate = 2, .dp_shard = 2, .ep = 2}, SS::HYBRID_SHARD),
          L("TP 2 x EP 2 x FSDP 2, SP", {.tp = 2, .ep = 2}, SS::FULL_SHARD, true),
          L("TP 2 x FSDP 2 (experts split)", {.tp = 2}),
          L("PP 2 x EP 2 x FSDP 2", {.pp = 2, .ep = 2}),
          L("PP 2 x TP 2 (experts split), SP", {.pp = 2, .tp = 2}, SS::FULL_SHARD, true),
          L("EP 4", {.ep = 4})};
}

void train_steps(Placed& placed, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = my_rows(*placed.p, s);
    placed.p->forward_backward(x, y);
    placed.p->clip_grad_norm_(kMaxNorm);
    placed.opt->step();
    placed.opt->zero_grad();
  }
}

void save(const fs::path& dir, Placed& placed, state::StateDictType type) {
  state::save_state_dict(dir, placed.p->roots(), placed.opt.get(), test::world().group(),
                         save_options(type));
}

void load(const fs::path& dir, Placed& placed) {
  state::load_state_dict(dir, placed.p->roots(), placed.opt.get(), test::world().group(),
                         load_options());
}

// Each source layout trained and saved; `targets(i)` lists the layouts that load layout i's.
void move_checkpoints(Arch a, const std::string& tag,
                      const std::function<std::vector<size_t>(size_t, size_t)>& targets) {
  auto& w = test::world();
  const auto layouts = layouts_of(a);
  const size_t n = layouts.size();
  std::vector<std::map<std::string, at::Tensor>> want(n);
  for (size_t i = 0; i < n; ++i) {
    auto src = place(a, layouts[i]);
    train_steps(src, 2);
    save(scratch(fmt::format("{}_{}_sharded", tag, i)), src, state::StateDictType::SHARDED);
    const auto full = scratch(fmt::format("{}_{}_full", tag, i));
    save(full, src, state::StateDictType::FULL);
    want[i] = test::read_full_checkpoint(full);
    ASSERT_GT(want[i].size(), 20u);
  }
  for (size_t i = 0; i < n; ++i) {
    const auto from = scratch(fmt::format("{}_{}_sharded", tag, i));
    for (size_t j : targets(i, n)) {
      auto dst = place(a, layouts[j]);
      load(from, dst);
      const auto out = scratch(fmt::format("{}_{}_into_{}", tag, i, j));
      save(out, dst, state::StateDictType::FULL);
      test::expect_same_full_checkpoint(want[i], out,
                                        fmt::format("{}: {} into {}", name_of(a), layouts[i].name,
                                                    layouts[j].name));
    }
    // Into one process (each rank alone).
    auto one = one_process(a);
    state::load_state_dict(from, one.plan->module(), one.opt.get(), one.group, load_options());
    const auto out = scratch(fmt::format("{}_{}_one", tag, i), w.rank());
    state::save_state_dict(out, one.plan->module(), one.opt.get(), one.group,
                           save_options(state::StateDictType::FULL));
    test::expect_same_full_checkpoint(want[i], out,
                                      fmt::format("{}: {} into one process", name_of(a), layouts[i].name));
  }
  // And back: one process (rank 0's) saves the first layout's state SHARDED; every layout loads it.
  {
    auto one = one_process(a);
    state::load_state_dict(scratch(fmt::format("{}_0_sharded", tag)), one.plan->module(),
                           one.opt.get(), one.group, load_options());
    state::save_state_dict(scratch(tag + "_from_one", w.rank()), one.plan->module(), one.opt.get(),
                           one.group, save_options(state::StateDictType::SHARDED));
    w.group()->barrier();
    for (size_t j = 0; j < n; ++j) {
      auto dst = place(a, layouts[j]);
      load(scratch(tag + "_from_one", 0), dst);
      const auto out = scratch(fmt::format("{}_back_{}", tag, j));
      save(out, dst, state::StateDictType::FULL);
      test::expect_same_full_checkpoint(
          want[0], out, fmt::format("{}: one process into {}", name_of(a), layouts[j].name));
    }
  }
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(scratch(""));
  state::remove_tree(scratch("", w.rank()));
}

}  // namespace

TEST(ParallelizeState, CheckpointsMoveBetweenLayoutsBitForBit) {
  ASSERT_EQ(test::world().size(), 4) << "this test needs 4 ranks";
  auto next = [](size_t i, size_t n) { return std::vector<size_t>{(i + 1) % n}; };
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) move_checkpoints(a, name_of(a), next);
}

TEST(ParallelizeStateSlow, EveryPairOfLayouts) {
  ASSERT_EQ(test::world().size(), 4) << "this test needs 4 ranks";
  auto others = [](size_t i, size_t n) {
    std::vector<size_t> out;
    for (size_t j = 0; j < n; ++j) {
      if (j != i) out.push_back(j);
    }
    return out;
  };
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    move_checkpoints(a, std::string("all_") + name_of(a), others);
  }
}

// LOCAL: every rank's raw shards, for the same layout only. Pipelines hold several roots per
// rank and tensor and expert parallelism outer placements: each reloads into its own layout.
TEST(ParallelizeState, LocalStateDictsReloadIntoTheirLayout) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  const std::vector<std::pair<Arch, Layout>> cases = {
      {Arch::kLlama, L("PP 2 x FSDP 2, ZBV", {.pp = 2}, SS::FULL_SHARD, false, "ZBVZeroBubble")},
      {Arch::kLlama, L("PP 2 x TP 2", {.pp = 2, .tp = 2})},
      {Arch::kQwen3Moe, L("TP 2 x EP 2 x FSDP 2", {.tp = 2, .ep = 2})},
      {Arch::kQwen3Moe, L("PP 2 x EP 2", {.pp = 2, .ep = 2})},
  };
  int k = 0;
  for (const auto& [a, l] : cases) {
    auto src = place(a, l);
    train_steps(src, 2);
    const auto local = scratch(fmt::format("local_{}", k)), full = scratch(fmt::format("local_full_{}", k));
    save(local, src, state::StateDictType::LOCAL);
    save(full, src, state::StateDictType::FULL);
    auto dst = place(a, l);
    load(local, dst);
    const auto out = scratch(fmt::format("local_out_{}", k));
    save(out, dst, state::StateDictType::FULL);
    test::expect_same_full_checkpoint(test::read_full_checkpoint(full), out,
                                      fmt::format("{} {} LOCAL", name_of(a), l.name));
    ++k;
  }
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(scratch(""));
}

// The loss scaler of float16 training over every rank that holds part of the model: a power of
// two scales and unscales exactly, so training stays the single process's; an inf on one rank
// (a stage, a tp or ep rank) skips the step on all of them.
TEST(ParallelizeState, GradScalerAgreesOverEveryDim) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  for (const auto& [a, l] : std::vector<std::pair<Arch, Layout>>{
           {Arch::kLlama, L("PP 2 x TP 2, SP", {.pp = 2, .tp = 2}, SS::FULL_SHARD, true)},
           {Arch::kQwen3Moe, L("TP 2 x EP 2 x FSDP 2", {.tp = 2, .ep = 2})}}) {
    SCOPED_TRACE(fmt::format("{} {}", name_of(a), l.name));
    const auto& ref = reference(a);
    auto placed = place(a, l);
    auto& p = *placed.p;
    auto scaler = p.grad_scaler({.init_scale = 1024.0});
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = my_rows(p, s);
      const auto step = p.forward_backward(x, y, scaler->get_scale());
      EXPECT_TRUE(scaler->unscale_());
      const double norm = p.clip_grad_norm_(kMaxNorm);
      EXPECT_TRUE(scaler->step(*placed.opt));
      scaler->update();
      placed.opt->zero_grad();
      auto loss = torch::tensor({step.loss}, torch::kDouble);
      p.mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
      EXPECT_NEAR(loss.item<double>() / p.dims().dp(), ref.losses[static_cast<size_t>(s)], kTol) << s;
      EXPECT_NEAR(norm / ref.norms[static_cast<size_t>(s)], 1.0, kTol) << s;
    }
    // Rank 3 alone finds an inf: every rank skips and halves the scale.
    auto [x, y] = my_rows(p, 0);
    p.forward_backward(x, y, scaler->get_scale());
    if (w.rank() == 3) {
      for (auto& t : p.parameters()) {
        if (t.grad().defined() && t.grad().numel() > 0) {
          t.mutable_grad().view(-1)[0] = INFINITY;
          break;
        }
      }
    }
    const double before = scaler->get_scale();
    EXPECT_FALSE(scaler->unscale_());
    EXPECT_FALSE(scaler->step(*placed.opt));
    scaler->update();
    EXPECT_EQ(scaler->get_scale(), before / 2);
    placed.opt->zero_grad();
  }
}

// Parameters offloaded to host memory (FSDP's OffloadPolicy) and the optimizer's state in a file
// (DiskOffloadedOptimizer), under pipeline, tensor and expert parallelism: one process's run.
TEST(ParallelizeState, OffloadUnderEveryParallelism) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  for (const auto& [a, l] : std::vector<std::pair<Arch, Layout>>{
           {Arch::kLlama, L("PP 2 x TP 2", {.pp = 2, .tp = 2})},
           {Arch::kQwen3Moe, L("TP 2 x EP 2 x FSDP 2, SP", {.tp = 2, .ep = 2}, SS::FULL_SHARD, true)}}) {
    SCOPED_TRACE(fmt::format("{} {}", name_of(a), l.name));
    const auto& ref = reference(a);
    parallel::ParallelizeOptions o;
    o.fsdp.offload_policy.offload_params = true;
    o.fsdp.offload_policy.pin_memory = false;
    o.sequence_parallel = l.sequence_parallel;
    o.microbatches = kMicro;
    auto p = parallel::parallelize(fresh(a), w, l.dims, o);
    auto opt = std::make_shared<torch::optim::AdamW>(adamw(p->parameters()));
    DiskOffloadOptions d;
    d.dir = scratch("offload", w.rank());
    d.rank = w.rank();
    DiskOffloadedOptimizer offloaded(opt, d);
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = my_rows(*p, s);
      const auto step = p->forward_backward(x, y);
      const double norm = p->clip_grad_norm_(kMaxNorm);
      offloaded.step();
      offloaded.zero_grad();
      auto loss = torch::tensor({step.loss}, torch::kDouble);
      p->mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
      EXPECT_NEAR(loss.item<double>() / p->dims().dp(), ref.losses[static_cast<size_t>(s)], kTol) << s;
      EXPECT_NEAR(norm / ref.norms[static_cast<size_t>(s)], 1.0, kTol) << s;
    }
    EXPECT_GT(offloaded.mapped_bytes(), 0);
  }
  state::remove_tree(scratch("", w.rank()));
}

// What stays refused, each before anything changes or on every rank alike, saying why.
TEST(ParallelizeRefusals, SayWhy) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  auto refused = [&](Arch a, parallel::ParallelDims d, parallel::ParallelizeOptions o,
                     const std::string& says) {
    try {
      parallel::parallelize(fresh(a), w, d, o);
      ADD_FAILURE() << "accepted; expected an error saying '" << says << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  parallel::ParallelizeOptions o;
  refused(Arch::kLlama, {.ep = 2}, o, "Llama has no experts to place");
  refused(Arch::kLlama, {.ep = 3}, o, "ep=3 does not divide dp_shard x tp = 4 x 1");
  refused(Arch::kLlama, {.dp_replicate = 2}, o, "dp_replicate=2 needs a HYBRID strategy");
  refused(Arch::kLlama, {.tp = 3}, o, "cannot fill 4 ranks");
  {
    auto sp = o;
    sp.sequence_parallel = true;
    refused(Arch::kLlama, {}, sp, "sequence parallelism splits what tensor parallelism leaves whole");
  }
  {
    auto split = o;
    split.split_experts = true;
    refused(Arch::kQwen3Moe, {.tp = 2, .ep = 2}, split,
            "experts are either split over tp or placed over ep");
  }
  {
    auto lps = o;
    lps.layers_per_stage = 4;  // 6 units: stages of 4 + 2, but ZBV on 2 ranks runs 4 stages
    lps.schedule = "ZBVZeroBubble";
    refused(Arch::kLlama, {.pp = 2}, lps, "needs 4 (2 per rank)");
  }
  {
    auto bad = o;
    bad.schedule = "Pipedream";
    refused(Arch::kLlama, {.pp = 2}, bad, "unknown schedule 'Pipedream'");
  }
  {
    // The tied table would live on the first and the last stage.
    auto cfg = llama_config();
    cfg.tie_embeddings = true;
    try {
      parallel::parallelize(models::plan_of(models::Llama(cfg)), w, {.pp = 2}, o);
      ADD_FAILURE() << "tied embeddings under a pipeline were accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("tie_embeddings cannot be split into pipeline stages"),
                std::string::npos) << e.what();
    }
  }
  {
    // Whole experts under tensor parallelism route each rank's chunk of the sequence.
    auto cfg = qwen3_config();
    cfg.max_position_embeddings = 32;
    auto whole = o;
    whole.split_experts = false;
    auto p = parallel::parallelize(models::plan_of(models::Qwen3Moe(cfg)), w, {.tp = 4}, whole);
    auto t = torch::randint(0, 61, {2, 7});
    try {
      p->forward_backward(t, t);
      ADD_FAILURE() << "a sequence of 7 over 4 tensor-parallel ranks was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "has size 7, which the tensor-parallel degree 4 does not divide"),
                std::string::npos)
          << e.what();
    }
  }
}
