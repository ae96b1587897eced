// What runs on a GPU, each checked against a reference computed another way: collectives on
// CUDA tensors (NCCL at one rank, Gloo staged through the host at two) against the sums written
// out; fully_shard on CUDA against one process training the whole batch on the CPU; a delayed
// comm stream that must not change a result (the stream-race check); state dicts; the fused
// AdamW against LibTorch's; the device's memory statistics; Qwen3-MoE's grouped expert GEMMs
// against the CPU's per-expert loop.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "../support/test_models.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/fsdp/float8_cast.h"
#include "fsdpp/fsdp/float8_linear.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/optim/fused_adamw.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "gpu_world.h"

using namespace fsdpp;

namespace {

c10::Device device() { return test::gpu_world().device(); }

// A tensor of `value` that only a long kernel produces: a collective that read it before that
// kernel ran (no order with the compute stream) would see what the buffer held before.
at::Tensor slow_full(int64_t n, double value) {
  auto a = torch::ones({4096, 4096}, torch::TensorOptions(torch::kFloat).device(device()));
  auto big = at::mm(a, a);  // every element 4096
  return big.reshape({-1}).narrow(0, 0, n) * (value / 4096.0);
}

// Sets FSDPP_DEBUG_COMM_DELAY_CYCLES while groups are made, so that theirs spin first.
struct CommDelay {
  explicit CommDelay(int64_t cycles) { setenv("FSDPP_DEBUG_COMM_DELAY_CYCLES", std::to_string(cycles).c_str(), 1); }
  ~CommDelay() { unsetenv("FSDPP_DEBUG_COMM_DELAY_CYCLES"); }
};

}  // namespace

TEST(GpuDevice, MemoryStatisticsFollowTheAllocator) {
  const auto before = dist::device_memory(device());
  EXPECT_GT(before.total, 0);
  EXPECT_GT(before.free, 0);
  auto t = torch::empty({64 << 20}, torch::TensorOptions(torch::kByte).device(device()));
  const auto after = dist::device_memory(device());
  EXPECT_GE(after.allocated - before.allocated, 64 << 20);
  EXPECT_GE(after.peak_allocated, after.allocated);
  EXPECT_GE(after.reserved, after.allocated);
}

TEST(GpuDevice, SideStreamOrderedByEvents) {
  auto compute = dist::Stream::current(device());
  auto side = dist::Stream::from_pool(device());
  ASSERT_TRUE(side.on_device());
  at::Tensor out;
  auto x = slow_full(1000, 3.0);  // on the compute stream
  {
    dist::StreamGuard on(side);
    side.wait(dist::Event::recorded_on(compute));
    out = x * 2;  // on the side stream, after x
  }
  compute.wait(dist::Event::recorded_on(side));
  EXPECT_TRUE(torch::equal(out.cpu(), torch::full({1000}, 6.0f)));
}

TEST(GpuCollectives, FollowTheProducersStreamAndFeedTheConsumers) {
  auto& w = test::gpu_world();
  const int n = w.size(), r = w.rank();
  for (int64_t delay : {0, 20'000'000}) {
    std::shared_ptr<dist::DeviceMesh> mesh;
    {
      CommDelay d(delay);
      mesh = w.init_device_mesh({n}, {"x"});
    }
    auto& g = *mesh->group("x");
    auto t = slow_full(4096, r + 1);
    g.all_reduce(t, dist::ReduceOp::SUM);
    auto sum = t * 1;  // read on the compute stream right after the wait
    EXPECT_TRUE(torch::equal(sum.cpu(), torch::full({4096}, n * (n + 1) / 2.0f))) << "delay " << delay;
    auto gathered = torch::empty({n * 4096}, t.options());
    g.all_gather_into_tensor(gathered, slow_full(4096, r));
    auto expect = torch::arange(n, torch::kFloat).repeat_interleave(4096);
    EXPECT_TRUE(torch::equal(gathered.cpu(), expect)) << "delay " << delay;
    auto scattered = torch::empty({4096}, t.options());
    g.reduce_scatter_tensor(scattered, slow_full(n * 4096, 1.0), dist::ReduceOp::SUM);
    EXPECT_TRUE(torch::equal(scattered.cpu(), torch::full({4096}, static_cast<float>(n))));
    // CPU tensors on the group stay a CPU contract (staged through the device on NCCL).
    auto host = torch::full({8}, static_cast<double>(r + 1), torch::kDouble);
    g.all_reduce(host, dist::ReduceOp::MAX);
    EXPECT_TRUE(torch::equal(host, torch::full({8}, static_cast<double>(n), torch::kDouble)));
  }
}

namespace {

constexpr int64_t kGlobalBatch = 8;
constexpr int kSteps = 4;

std::pair<at::Tensor, at::Tensor> batch(int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(3000 + step);
  auto tokens = torch::randint(0, 29, {kGlobalBatch, 17}, g);
  return {tokens.narrow(1, 0, 16), tokens.narrow(1, 1, 16)};
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& y) {
  return torch::cross_entropy_loss(logits.reshape({-1, 29}).to(torch::kFloat), y.reshape({-1}));
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;  // full, on the CPU
};

// One process on the CPU, the whole global batch: the reference.
TrainRun reference_run() {
  torch::manual_seed(77);
  test::TinyTransformer ref(29, 32, 4, 2);
  torch::optim::AdamW opt(ref->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  TrainRun out;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    auto loss = lm_loss(ref->forward(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    out.losses.push_back(loss.item<double>());
  }
  for (const auto& p : ref->named_parameters()) out.params[p.key()] = p.value().detach().clone();
  return out;
}

// fully_shard on this rank's GPU over `mesh`, this rank's slice of each batch, FusedAdamW.
TrainRun gpu_run(ShardingStrategy strategy, std::optional<at::ScalarType> param_dtype,
            const std::shared_ptr<dist::DeviceMesh>& mesh, const std::filesystem::path& save_to = {}) {
  auto& w = test::gpu_world();
  torch::manual_seed(77);
  test::TinyTransformer model(29, 32, 4, 2);
  model->to(device());
  FullyShardOptions o;
  o.mesh = mesh;
  o.strategy = strategy;
  o.forward_prefetch = 1;
  o.mp_policy.param_dtype = param_dtype;
  o.mp_policy.reduce_dtype = at::kFloat;
  model->shard(o);
  optim::FusedAdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  const int64_t local = kGlobalBatch / w.size();
  TrainRun out;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    x = x.narrow(0, w.rank() * local, local).to(device());
    y = y.narrow(0, w.rank() * local, local).to(device());
    auto loss = lm_loss(fsdpp::forward(model, x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    auto global = loss.detach().to(torch::kDouble).reshape({1});
    w.group()->all_reduce(global, dist::ReduceOp::AVG);
    out.losses.push_back(global.item<double>());
  }
  for (auto& [name, t] : full_parameters(*model)) out.params[name] = t.cpu().to(torch::kFloat);
  if (!save_to.empty()) state::save_state_dict(save_to, *model, &opt, mesh->group(0));
  return out;
}

void expect_close(const TrainRun& got, const TrainRun& ref, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], atol + rtol * std::abs(ref.losses[i]))
        << what << ": loss of step " << i + 1;
  }
  ASSERT_EQ(got.params.size(), ref.params.size()) << what;
  for (const auto& [name, t] : ref.params) {
    ASSERT_TRUE(got.params.count(name)) << what << ": " << name;
    EXPECT_TRUE(torch::allclose(got.params.at(name), t, rtol, atol))
        << what << ": parameter " << name << " differs by "
        << (got.params.at(name) - t).abs().max().item<double>();
  }
}

}  // namespace

// fp32 on the GPU (TF32 is off in LibTorch by default) against the CPU: rounding only. The
// losses to 1e-4; the parameters to 1e-3, since AdamW turns a gradient element at rounding level
// into a step of the learning rate whichever way it rounds.
TEST(GpuFsdp, MatchesOneProcessOnTheCpu) {
  const TrainRun ref = reference_run();
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                 ShardingStrategy::ZERO1, ShardingStrategy::NO_SHARD}) {
    const TrainRun got = gpu_run(s, std::nullopt, test::gpu_world().mesh());
    for (size_t i = 0; i < ref.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-4 * std::abs(ref.losses[i])) << to_string(s) << " step " << i + 1;
    }
    expect_close(got, ref, 1e-3, 1e-3, to_string(s));
  }
}

// bf16 parameters and compute, fp32 reduction and master weights: within bf16's rounding.
TEST(GpuFsdp, Bf16ComputeWithFp32ReduceFollowsTheCpu) {
  const TrainRun ref = reference_run();
  const TrainRun got = gpu_run(ShardingStrategy::FULL_SHARD, at::kBFloat16, test::gpu_world().mesh());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 3e-2 * std::abs(ref.losses[i])) << "step " << i + 1;
  }
}

// The stream-race check: every collective's stream spins ~10 ms before it runs. A consumer that
// did not wait for the collective's event (or a buffer freed before its last use) would read
// stale or reused memory; the results must be those of the run without the delay.
TEST(GpuFsdp, DelayedCommStreamGivesTheSameResults) {
  auto& w = test::gpu_world();
  const TrainRun plain = gpu_run(ShardingStrategy::FULL_SHARD, std::nullopt, w.init_device_mesh({w.size()}, {"plain"}));
  std::shared_ptr<dist::DeviceMesh> slow;
  {
    CommDelay d(20'000'000);
    slow = w.init_device_mesh({w.size()}, {"slow"});
  }
  const TrainRun delayed = gpu_run(ShardingStrategy::FULL_SHARD, std::nullopt, slow);
  expect_close(delayed, plain, 1e-6, 1e-7, "delayed comm stream");
}

// A sharded checkpoint of CUDA shards loads into a fresh sharded model on the GPU unchanged.
TEST(GpuFsdp, ShardedStateDictRoundTrip) {
  auto& w = test::gpu_world();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fsdpp-gpu-ckpt-" + std::to_string(w.env().master_port));
  if (w.rank() == 0) state::remove_tree(dir);
  w.group()->barrier();
  const TrainRun trained = gpu_run(ShardingStrategy::FULL_SHARD, std::nullopt, w.mesh(), dir);
  torch::manual_seed(5);  // other initial weights
  test::TinyTransformer fresh(29, 32, 4, 2);
  fresh->to(device());
  FullyShardOptions o;
  o.mesh = w.mesh();
  fresh->shard(o);
  state::load_state_dict(dir, *fresh, nullptr, w.group());
  for (auto& [name, t] : full_parameters(*fresh)) {
    EXPECT_TRUE(torch::equal(t.cpu(), trained.params.at(name))) << name;
  }
  for (const auto& p : fresh->parameters()) EXPECT_TRUE(p.is_cuda());
}

TEST(GpuOptim, FusedAdamWMatchesLibTorchAdamW) {
  torch::manual_seed(3);
  std::vector<at::Tensor> a, b;
  for (auto shape : {std::vector<int64_t>{257, 33}, {1000}, {3, 5, 7}}) {
    auto p = torch::randn(shape, torch::TensorOptions(torch::kFloat).device(device()));
    a.push_back(p.clone().requires_grad_(true));
    b.push_back(p.clone().requires_grad_(true));
  }
  const auto options = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8);
  torch::optim::AdamW plain(a, options);
  optim::FusedAdamW fused(b, options);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    plain.step();
    fused.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << (a[i] - b[i]).abs().max().item<double>();
  }
}

// Qwen3-MoE's experts on the GPU in bfloat16 run as grouped GEMMs (ExpertKernel::AUTO there):
// their outputs and gradients follow the CPU's per-expert loop in float32 within bfloat16's
// precision, for the routed forward and for rows grouped by expert (issue 47).
TEST(GpuMoe, GroupedGemmsFollowTheCpuLoop) {
  torch::manual_seed(11);
  models::Qwen3MoeExperts cpu(8, 64, 32);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : cpu->parameters()) p.normal_(0, 0.2);
  }
  cpu->kernel = models::ExpertKernel::LOOP;
  models::Qwen3MoeExperts gpu(8, 64, 32);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < cpu->parameters().size(); ++i) gpu->parameters()[i].copy_(cpu->parameters()[i]);
  }
  gpu->to(device(), torch::kBFloat16);
  const auto x = torch::randn({96, 64});
  ASSERT_TRUE(gpu->runs_grouped(x.to(device(), torch::kBFloat16)));
  const auto ids = torch::randint(8, {96, 2}, torch::kLong);
  const auto w = torch::rand({96, 2});
  const auto gy = torch::randn({96, 64});
  auto xc = x.clone().requires_grad_(true);
  auto yc = cpu->forward(xc, ids, w);
  yc.backward(gy);
  auto xg = x.to(device(), torch::kBFloat16).requires_grad_(true);
  auto yg = gpu->forward(xg, ids.to(device()), w.to(device(), torch::kBFloat16));
  yg.backward(gy.to(device(), torch::kBFloat16));
  const auto close = [](const at::Tensor& got, const at::Tensor& want) {
    const double scale = want.abs().max().item<double>();
    return (got.cpu().to(torch::kFloat) - want).abs().max().item<double>() <= 3e-2 * scale;
  };
  EXPECT_TRUE(close(yg.detach(), yc.detach()));
  EXPECT_TRUE(close(xg.grad(), xc.grad()));
  EXPECT_TRUE(close(gpu->gate_proj.grad(), cpu->gate_proj.grad()));
  EXPECT_TRUE(close(gpu->down_proj.grad(), cpu->down_proj.grad()));
  // Rows already grouped by expert (what expert parallelism hands the experts).
  const std::vector<int64_t> counts = {10, 0, 30, 6, 20, 0, 14, 16};
  EXPECT_TRUE(close(gpu->forward(x.to(device(), torch::kBFloat16), counts).detach(),
                    cpu->forward(x, counts).detach()));
}

// Float8 on the GPU (issue 46): the casts and scales are the CPU's bit for bit (the same ATen
// ops), and the linear's three GEMMs through CUDA's _scaled_mm (tensorwise and rowwise scales)
// follow the CPU's (its _scaled_mm, or dequantized products for rowwise) to bfloat16 rounding.
TEST(GpuFloat8, FollowsTheCpu) {
  torch::manual_seed(5);
  const auto x = (torch::randn({4, 16, 64}) * torch::linspace(0.1, 3, 16).view({1, 16, 1})).to(torch::kBFloat16);
  const auto w = (torch::randn({48, 64}) * 0.2).to(torch::kBFloat16);
  const auto gy = torch::randn({4, 16, 48}).to(torch::kBFloat16);
  for (int64_t dim : {-1, 1}) {
    const auto qc = to_float8(x, torch::kFloat8_e4m3fn, dim, dim >= 0);
    const auto qg = to_float8(x.to(device()), torch::kFloat8_e4m3fn, dim, dim >= 0);
    EXPECT_TRUE(torch::equal(qg.scale.cpu(), qc.scale));
    EXPECT_TRUE(torch::equal(qg.data.cpu().to(torch::kFloat), qc.data.to(torch::kFloat)));
  }
  for (auto recipe : {Float8Recipe::TENSORWISE, Float8Recipe::ROWWISE}) {
    SCOPED_TRACE(std::string(to_string(recipe)));
    auto xc = x.clone().requires_grad_(true), wc = w.clone().requires_grad_(true);
    auto xg = x.to(device()).requires_grad_(true), wg = w.to(device()).requires_grad_(true);
    auto yc = float8_linear(xc, wc, recipe);
    auto yg = float8_linear(xg, wg, recipe);
    yc.backward(gy);
    yg.backward(gy.to(device()));
    const auto close = [](const at::Tensor& got, const at::Tensor& want) {
      const double scale = want.abs().max().item<double>();
      return (got.cpu().to(torch::kFloat) - want.to(torch::kFloat)).abs().max().item<double>() <= 1e-2 * scale;
    };
    EXPECT_TRUE(close(yg.detach(), yc.detach()));
    EXPECT_TRUE(close(xg.grad(), xc.grad()));
    EXPECT_TRUE(close(wg.grad(), wc.grad()));
  }
}
