// The pipeline runtime against single-process training of the same Llama on the same global
// batch: every schedule on pp 2 and pp 4 with m = 1, p, 2p and p + 1, and pp 2 x FSDP 2 on a
// (pp, dp_shard) mesh: ten AdamW steps with global-norm clipping, every step's loss and every
// final parameter within 1e-5; the split backward against one backward. Measured bubbles and
// failures are in test_pipeline_measured.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/clip.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/pipeline/blocks.h"
#include "fsdpp/tp/plan.h"
#include "fsdpp/pipeline/runtime.h"
#include "fsdpp/pipeline/schedules.h"
#include "fsdpp/pipeline/simulate.h"
#include "pipeline_llama.h"
#include "world_fixture.h"

using namespace fsdpp;
using namespace fsdpp::test::pipeline_llama;
namespace pp = fsdpp::pipeline;


// Every schedule at m = 1, p, 2p and p + 1 over all ranks of the world as the pp group (run
// with 2 and 4 ranks). One test so that the ranks start once.
TEST(Pipeline, EveryScheduleMatchesOneProcess) {
  auto& w = test::world();
  const int p = w.size();
  ASSERT_GE(p, 2) << "run with 2 or 4 ranks";
  // Enough units (embedding, blocks, head) for two stages per rank.
  const auto cfg = tiny_llama(2 * p - 2);
  std::map<int64_t, Reference> refs;
  int cases = 0;
  for (const char* name :
       {"GPipe", "1F1B", "Interleaved1F1B", "ZBH1", "InterleavedZeroBubble", "ZBVZeroBubble"}) {
    for (int m : {1, p, 2 * p, p + 1}) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto problem = run_case(name, m, cfg, w.group(), refs);
      EXPECT_EQ(problem, "") << name << " on pp " << p << " with m = " << m;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (w.rank() == 0) std::printf("  %-22s pp %d m %2d: parity ok=%d (%.2f s)\n", name, p, m,
                                     problem.empty() ? 1 : 0, s);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 24);
}

// ZBVZeroBubble on a fresh pp group each run, where its hang lived (fsdpp-train hung in step 1
// in 5 runs of 6: a recv the transport had completed waited in the comm queue behind a send
// blocked until its peer's later recv; docs/faults.md#third-pass). 2p - 2 and 2p blocks, m = 2,
// 4, 8 and 16, four times each: 32 first steps on groups with a 5 s timeout, the stall check after
// 1 s. Before the fix the fifth run stalled (and the stall check named it); each run takes
// milliseconds.
TEST(Pipeline, ZbvOnFreshGroupsNeverStalls) {
  auto& w = test::world();
  const int p = w.size();
  ASSERT_GE(p, 2) << "run with 2 or 4 ranks";
  std::vector<int> ranks(static_cast<size_t>(p));
  std::iota(ranks.begin(), ranks.end(), 0);
  int runs = 0;
  for (int64_t layers : {2 * p - 2, 2 * p}) {
    const auto cfg = tiny_llama(layers);
    for (int m : {2, 4, 8, 16}) {
      for (int rep = 0; rep < 4; ++rep, ++runs) {
        dist::ProcessGroup::Options o;
        o.backend = w.backend();
        o.timeout = std::chrono::milliseconds(5000);
        o.name = fmt::format("zbv_fresh_{}", runs);
        o.global_ranks = ranks;
        o.master_addr = w.env().master_addr;
        o.gloo_hostname = w.gloo_address();
        auto g = dist::ProcessGroup::create(w.store(), w.rank(), p, o);
        const auto sched = pp::make_schedule("ZBVZeroBubble", p, m);
        models::Llama model(cfg);
        pp::PipelineRuntime rt(sched, llama_stages(model, sched, g->rank()), g,
                               {.store = w.store(), .stall_check_after = std::chrono::seconds(1)});
        const auto b = batch(runs, m * kMicrobatchSize, cfg);
        std::string error;
        try {
          const double loss = rt.step(b.tokens, b.targets).loss;
          EXPECT_TRUE(std::isfinite(loss)) << loss;
        } catch (const std::exception& e) {
          error = e.what();
        }
        ASSERT_EQ(error, "") << layers << " blocks, m = " << m << ", run " << rep + 1;
      }
    }
  }
  if (w.rank() == 0) std::printf("  ZBVZeroBubble pp %d: %d first steps on fresh groups\n", p, runs);
  w.group()->barrier();
}

namespace {

// y = tanh(a x) for the first stage; the second applies `a` and then `b` (or `a` twice: a weight
// used before and after another use of the input, which the split backward cannot separate and
// so runs whole in W).
struct TinyStageImpl : torch::nn::Module {
  TinyStageImpl(bool last, bool reuse) : last(last), reuse(reuse) {
    a = register_module("a", torch::nn::Linear(8, 8));
    if (last && !reuse) b = register_module("b", torch::nn::Linear(8, 8));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::tanh(a(x));
    if (!last) return h;
    return reuse ? a(h) : b(h);
  }
  bool last, reuse;
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(TinyStage);

}  // namespace

// I then W gives the gradients one full backward gives: ZBVZeroBubble on a pp group of one
// rank (both stages here, the second with an input gradient to split from), and B
// (Interleaved1F1B, two stages on the rank), against the two stages run whole in one backward;
// with a weight used twice too.
TEST(Pipeline, SplitBackwardEqualsFullBackward) {
  auto& w = test::world();
  auto solo = w.new_group({w.rank()}, "pipeline_solo_" + std::to_string(w.rank()));
  auto g = at::make_generator<at::CPUGeneratorImpl>(3);
  auto x = torch::randn({4, 8}, g);
  auto target = torch::randn({4, 8}, g);
  for (bool reuse : {false, true}) {
    TinyStage s0(false, reuse), s1(true, reuse);
    // The reference: both stages over the whole batch, one backward.
    auto loss = torch::mse_loss(s1(s0(x)), target);
    loss.backward();
    std::map<std::string, at::Tensor> want;
    for (const auto& p : s0->named_parameters()) want["0." + p.key()] = p.value().grad().clone();
    for (const auto& p : s1->named_parameters()) want["1." + p.key()] = p.value().grad().clone();
    for (const char* name : {"ZBVZeroBubble", "Interleaved1F1B"}) {
      auto sched = pp::make_schedule(name, 1, 2);
      ASSERT_EQ(sched.num_stages, 2) << name;
      s0->zero_grad();
      s1->zero_grad();
      std::vector<pp::PipelineStage> stages{
          pp::make_stage(0, s0),
          pp::make_stage(1, s1, [](const at::Tensor& y, const at::Tensor& t) {
            return torch::mse_loss(y, t);
          })};
      pp::PipelineRuntime rt(sched, std::move(stages), solo);
      auto out = rt.step(x, target);
      EXPECT_NEAR(out.loss, loss.item<double>(), 1e-6) << name;
      for (const auto& p : s0->named_parameters()) {
        EXPECT_TRUE(torch::allclose(p.value().grad(), want["0." + p.key()], 1e-5, 1e-7))
            << name << " stage 0 " << p.key() << (reuse ? " (weight used twice)" : "");
      }
      for (const auto& p : s1->named_parameters()) {
        EXPECT_TRUE(torch::allclose(p.value().grad(), want["1." + p.key()], 1e-5, 1e-7))
            << name << " stage 1 " << p.key() << (reuse ? " (weight used twice)" : "");
      }
    }
  }
}

namespace {

// Eight blocks (Linear, Tanh), the same values for the same seed.
torch::nn::Sequential eight_blocks() {
  torch::manual_seed(11);
  torch::nn::Sequential seq;
  for (int i = 0; i < 4; ++i) {
    seq->push_back(torch::nn::Linear(6, 6));
    seq->push_back(torch::nn::Tanh());
  }
  return seq;
}

}  // namespace

// Any Sequential cut by ranges of blocks (pipeline/blocks.h), as AiDotNet's Pipeline.Wrap(model,
// stages) does: the loss and every gradient equal one process's on the whole batch, for even
// ranges and an uneven cut, one and two stages per rank; the stages' parameter names are the
// model's; a cut that skips or repeats blocks is refused naming the stage.
TEST(Pipeline, SequentialCutByBlockRangesMatchesOneProcess) {
  auto& w = test::world();
  const int p = w.size();
  auto g = at::make_generator<at::CPUGeneratorImpl>(5);
  auto x = torch::randn({8, 6}, g), target = torch::randn({8, 6}, g);
  auto ref = eight_blocks();
  auto ref_loss = torch::mse_loss(ref->forward(x), target);
  ref_loss.backward();
  std::map<std::string, at::Tensor> want;
  for (const auto& q : ref->named_parameters()) want[q.key()] = q.value().grad();
  const auto mse = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); };
  struct Case {
    const char* schedule;
    bool uneven;
  };
  for (const Case c : {Case{"GPipe", false}, Case{"1F1B", true}, Case{"Interleaved1F1B", false}}) {
    auto sched = pp::make_schedule(c.schedule, p, /*microbatches=*/4);
    auto model = eight_blocks();
    auto ranges = pp::even_ranges(static_cast<int64_t>(model->size()), sched.num_stages);
    if (c.uneven) {  // the first stage one block, the last stage the rest
      ranges.assign(static_cast<size_t>(sched.num_stages), pp::BlockRange{});
      for (int s = 0; s < sched.num_stages; ++s) ranges[static_cast<size_t>(s)] = {s, s + 1};
      ranges.back().end = static_cast<int64_t>(model->size());
    }
    auto stages = pp::split_blocks(model, ranges);
    std::vector<pp::PipelineStage> mine;
    std::vector<pp::BlockStage> held;
    for (int s : sched.stages_of(w.rank())) {
      std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
      if (s == sched.num_stages - 1) loss = mse;
      mine.push_back(pp::make_stage(s, stages[static_cast<size_t>(s)], loss));
      held.push_back(stages[static_cast<size_t>(s)]);
    }
    pp::PipelineRuntime rt(sched, std::move(mine), w.group());
    const auto out = rt.step(x, target);
    EXPECT_NEAR(out.loss, ref_loss.item<double>(), 1e-6) << c.schedule;
    int checked = 0;
    for (const auto& st : held) {
      for (const auto& q : st->named_parameters()) {
        ASSERT_TRUE(want.count(q.key())) << "a stage's parameter " << q.key() << " is not the model's";
        EXPECT_TRUE(torch::allclose(q.value().grad(), want.at(q.key()), 1e-5, 1e-7)) << c.schedule << " " << q.key();
        ++checked;
      }
    }
    // Every parameter is some rank's (a rank may hold only Tanh blocks, without parameters).
    auto held_params = torch::tensor({static_cast<int64_t>(checked)}, torch::kLong);
    w.group()->all_reduce(held_params, dist::ReduceOp::SUM, {"test"});
    EXPECT_EQ(held_params.item<int64_t>(), static_cast<int64_t>(want.size())) << c.schedule;
  }
  auto model = eight_blocks();
  const auto error = [&](const std::vector<pp::BlockRange>& r) {
    try {
      pp::split_blocks(model, r);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({{0, 3}, {4, 8}}).find("stage 1 has blocks [4, 8)"), std::string::npos) << error({{0, 3}, {4, 8}});
  EXPECT_NE(error({{0, 3}, {3, 6}}).find("blocks [6, 8) are in no stage"), std::string::npos);
  EXPECT_NE(error({{0, 3}, {3, 3}, {3, 8}}).find("stage 1 has blocks [3, 3)"), std::string::npos);
}

// pp 2 x FSDP 2 on a (pp, dp_shard) mesh (run with 4 ranks): each stage fully_shard-ed over its
// dp_shard pair (every block a unit, the stage the root), the global batch split over dp, the
// gradients reduce-scattered once per step (or every microbatch), clipping over pp and dp_shard.
TEST(PipelineFsdp, Pp2TimesFsdp2MatchesOneProcess) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "run with 4 ranks";
  auto mesh = w.init_device_mesh({2, 2}, {"pp", "dp_shard"});
  const auto& pp_group = mesh->group("pp");
  const auto& dp_group = mesh->group("dp_shard");
  const auto dp_mesh = mesh->sub({"dp_shard"});
  const auto cfg = tiny_llama(2);
  struct Case {
    const char* name;
    int m;
    ShardingStrategy strategy;
    bool every_microbatch;
    bool keep_gathered = true;
  };
  using enum ShardingStrategy;
  const Case cases[] = {{"GPipe", 2, FULL_SHARD, false},
                        {"1F1B", 4, FULL_SHARD, false},
                        {"1F1B", 3, ZERO1, false},
                        {"Interleaved1F1B", 4, SHARD_GRAD_OP, false},
                        {"1F1B", 2, FULL_SHARD, true},
                        // Backward split into I and W: the weight gradients arrive after the
                        // autograd call FSDP's end-of-backward follows.
                        {"ZBH1", 4, FULL_SHARD, false},
                        {"ZBH1", 3, FULL_SHARD, true},
                        {"InterleavedZeroBubble", 4, FULL_SHARD, false},
                        {"ZBVZeroBubble", 3, SHARD_GRAD_OP, false},
                        // The other choice: FSDP's hooks gather and reshard every microbatch.
                        {"1F1B", 4, FULL_SHARD, false, false},
                        {"GPipe", 2, ZERO1, false, false}};
  std::map<int64_t, Reference> refs;
  for (const auto& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t local = c.m * kMicrobatchSize;
    const int64_t global = 2 * local;
    if (!refs.count(global)) refs[global] = reference(cfg, global);
    const auto& ref = refs.at(global);
    auto sched = pp::make_schedule(c.name, 2, c.m);
    models::Llama model(cfg);
    std::vector<models::LlamaStage> all;
    auto mine = llama_stages(model, sched, pp_group->rank(), &all);
    FullyShardOptions o;
    o.mesh = dp_mesh;
    o.strategy = c.strategy;
    for (int s : sched.stages_of(pp_group->rank())) {
      auto& st = all[static_cast<size_t>(s)];
      for (auto& b : st->blocks) fully_shard(*b, o);
      fully_shard(*st, o);
    }
    pp::PipelineRuntime rt(sched, std::move(mine), pp_group,
                           {.store = w.store(), .keep_gathered = c.keep_gathered,
                            .reduce_grad_every_microbatch = c.every_microbatch});
    auto opt = adamw(rt.parameters());
    Mismatch mm;
    const auto before = dp_group->counters();
    for (int step = 0; step < kSteps; ++step) {
      auto b = batch(step, global, cfg);
      const int64_t first = dp_group->rank() * local;
      opt.zero_grad();
      auto out = rt.step(b.tokens.narrow(0, first, local), b.targets.narrow(0, first, local));
      auto loss = torch::full({1}, out.loss, torch::kDouble);
      dp_group->all_reduce(loss, dist::ReduceOp::AVG);
      fsdpp::clip_grad_norm_(rt.placed_params(), kMaxNorm, 2.0, {pp_group});
      opt.step();
      mm.check(fmt::format("step {} loss", step), loss.item<double>(),
               ref.losses[static_cast<size_t>(step)]);
    }
    const auto traffic = dp_group->counters() - before;
    const auto reduce_scatters = traffic.calls_of(dist::Collective::REDUCE_SCATTER);
    int params = 0;
    std::set<std::string> units;  // (stage, unit) with parameters: one reduce-scatter each
    for (int s : sched.stages_of(pp_group->rank())) {
      for (const auto& p : sharded_params(*all[static_cast<size_t>(s)])) {
        mm.check(p.fqn, p.gather(p.local_shard.detach()), ref.params.at(p.fqn));
        units.insert(std::to_string(s) + "/" + p.unit);
        ++params;
      }
    }
    EXPECT_GT(params, 0);
    // Gradients are reduce-scattered once per step, or once per microbatch when asked.
    const auto all_gathers = traffic.calls_of(dist::Collective::ALL_GATHER);
    const std::string what = fmt::format("{} m = {} {}{}{}", c.name, c.m, to_string(c.strategy),
                                         c.every_microbatch ? " reducing every microbatch" : "",
                                         c.keep_gathered ? "" : " resharding every microbatch");
    EXPECT_EQ(reduce_scatters, static_cast<uint64_t>(kSteps * units.size() *
                                                     (c.every_microbatch ? c.m : 1)))
        << what;
    // Held gathered for the step: one all-gather per unit (ZERO1's after the optimizer step
    // changed its shard); otherwise FULL_SHARD gathers each unit in every forward and backward.
    if (c.keep_gathered) {
      EXPECT_EQ(all_gathers, static_cast<uint64_t>(kSteps * units.size())) << what;
    } else if (c.strategy == FULL_SHARD) {
      EXPECT_GT(all_gathers, static_cast<uint64_t>(kSteps * units.size() * c.m)) << what;
    }
    EXPECT_EQ(mm.first, "") << what;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w.rank() == 0) {
      // What keeping parameters gathered saves: all-gathers per step on the dp_shard group.
      std::printf("  pp 2 x %-13s 2, %-21s m %d%s%s: parity ok=%d, per step on rank 0: %.0f "
                  "all-gathers (%.0f KB), %.0f reduce-scatters (%.2f s)\n",
                  to_string(c.strategy), c.name, c.m,
                  c.every_microbatch ? " (reduce every microbatch)" : "",
                  c.keep_gathered ? "" : " (reshard every microbatch)", mm.first.empty() ? 1 : 0,
                  double(all_gathers) / kSteps,
                  double(traffic.bytes_of(dist::Collective::ALL_GATHER)) / kSteps / 1024,
                  double(reduce_scatters) / kSteps, s);
    }
  }
  // A schedule that splits backward is refused for FSDP stages that reshard every microbatch,
  // before anything runs.
  auto sched = pp::make_schedule("ZBH1", 2, 2);
  models::Llama model(cfg);
  std::vector<models::LlamaStage> all;
  auto mine = llama_stages(model, sched, pp_group->rank(), &all);
  FullyShardOptions o;
  o.mesh = dp_mesh;
  fully_shard(*all[static_cast<size_t>(pp_group->rank())], o);
  try {
    pp::PipelineRuntime rt(sched, std::move(mine), pp_group, {.keep_gathered = false});
    ADD_FAILURE() << "ZBH1 with FSDP stages resharding every microbatch was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).find("splits backward into I and W, which fully_shard-ed "
                                           "stages support only with RuntimeOptions::keep_gathered") !=
                std::string::npos)
        << e.what();
  }
}

// pp 2 x TP 2 on a (pp, tp) mesh (run with 4 ranks): the Llama tensor-parallel plan applied to
// the whole model, which is then cut into stages that keep its communication hooks; every rank
// of a tp pair runs the same schedule on the same global batch, and the clipping norm counts the
// tp-split parameters' pieces and the replicated ones once.
TEST(PipelineTp, Pp2TimesTp2MatchesOneProcess) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "run with 4 ranks";
  auto mesh = w.init_device_mesh({2, 2}, {"pp", "tp"});
  const auto& pp_group = mesh->group("pp");
  const auto& tp_group = mesh->group("tp");
  const auto cfg = tiny_llama(2);
  struct Case {
    const char* name;
    int m;
    bool sequence_parallel;
  };
  const Case cases[] = {{"1F1B", 4, false}, {"GPipe", 2, true}, {"Interleaved1F1B", 4, false},
                        {"ZBH1", 4, true}, {"ZBVZeroBubble", 3, false}};
  std::map<int64_t, Reference> refs;
  for (const auto& c : cases) {
    const int64_t global = c.m * kMicrobatchSize;
    if (!refs.count(global)) refs[global] = reference(cfg, global);
    const auto& ref = refs.at(global);
    auto sched = pp::make_schedule(c.name, 2, c.m);
    models::Llama model(cfg);
    auto tp = models::parallelize_llama(*model, tp_group, {.sequence_parallel = c.sequence_parallel});
    std::vector<models::LlamaStage> all;
    auto mine = llama_stages(model, sched, pp_group->rank(), &all);
    pp::PipelineRuntime rt(sched, std::move(mine), pp_group, {.store = w.store()});
    const auto layout = tp.outer_layout(*model);  // the tp placements, which clipping reads
    std::set<std::string> names;  // this rank's stages' parameters
    for (const auto& st : rt.stages()) {
      for (const auto& p : st.module->named_parameters()) names.insert(p.key());
    }
    auto opt = adamw(rt.parameters());
    Mismatch mm;
    const auto tp_before = tp_group->counters();
    for (int step = 0; step < kSteps; ++step) {
      auto b = batch(step, global, cfg);
      opt.zero_grad();
      auto out = rt.step(b.tokens, b.targets);
      fsdpp::clip_grad_norm_(rt.placed_params(layout), kMaxNorm, 2.0, {pp_group});
      opt.step();
      mm.check(fmt::format("step {} loss", step), out.loss, ref.losses[static_cast<size_t>(step)]);
    }
    const auto tp_bytes = (tp_group->counters() - tp_before).total_bytes();
    // Every parameter whole again (gathered over tp) against the single-process run.
    for (const auto& [name, full] : tp::full_parameters(*model, tp)) {
      if (names.count(name)) mm.check(name, full, ref.params.at(name));
    }
    EXPECT_GT(names.size(), 0u);
    EXPECT_GT(tp_bytes, 0u) << "tensor parallelism did not communicate";
    EXPECT_EQ(mm.first, "") << c.name << " m = " << c.m << (c.sequence_parallel ? " + SP" : "");
    if (w.rank() == 0) {
      std::printf("  pp 2 x TP 2%s, %-15s m %d: parity ok=%d (%d values), tp bytes sent %.0f KB\n",
                  c.sequence_parallel ? " + SP" : "", c.name, c.m, mm.first.empty() ? 1 : 0,
                  mm.checked, double(tp_bytes) / 1024);
    }
  }
}
