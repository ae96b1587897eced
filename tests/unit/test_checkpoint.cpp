// Activation checkpointing without FSDP: the functional form and module marking give the
// gradients plain autograd gives, including through dropout (the generator state is replayed).
#include <gtest/gtest.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/checkpoint_tail.h"
#include "fsdpp/fsdp/fully_shard.h"

namespace {

struct NoisyBlockImpl : torch::nn::Module {
  NoisyBlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 12));
    fc2 = register_module("fc2", torch::nn::Linear(12, 6));
  }
  // Two tensor inputs (one without grad), a non-tensor argument, a pair result.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& mask,
                                                  double p) {
    auto h = torch::dropout(torch::gelu(fc1(x)), p, /*train=*/true);
    auto y = x + fc2(h) * mask;
    return {y, h.sum(-1)};
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(NoisyBlock);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) blocks->push_back(NoisyBlock());
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    auto h = x;
    torch::Tensor side = torch::zeros({x.size(0)});
    for (size_t i = 0; i < blocks->size(); ++i) {
      auto [y, s] = fsdpp::forward(blocks->ptr<NoisyBlockImpl>(i), h, mask, 0.3);
      h = y;
      side = side + s;
    }
    return h.square().mean() + side.mean() * 0.01;
  }
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> grads_of(Net& net, bool checkpointed, torch::Tensor* x_grad) {
  torch::manual_seed(3);
  Net n;
  if (checkpointed) {
    auto marked = fsdpp::apply_activation_checkpointing(*n, {"NoisyBlock"});
    EXPECT_EQ(marked.size(), 3u);
  }
  auto x = torch::randn({5, 6}).requires_grad_(true);
  auto mask = (torch::rand({5, 6}) > 0.2).to(torch::kFloat);
  torch::manual_seed(99);  // the dropout masks
  n->forward(x, mask).backward();
  std::vector<torch::Tensor> out;
  for (const auto& p : n->parameters()) out.push_back(p.grad().clone());
  *x_grad = x.grad().clone();
  net = n;
  return out;
}

}  // namespace

TEST(Checkpoint, ModuleMarkingGivesPlainGradientsThroughDropout) {
  Net a{nullptr}, b{nullptr};
  torch::Tensor xa, xb;
  auto plain = grads_of(a, false, &xa);
  auto ckpt = grads_of(b, true, &xb);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], ckpt[i])) << i;
  EXPECT_TRUE(torch::equal(xa, xb));
  // Without replaying the generator the dropout masks differ, and so would the gradients:
  // the replay is what the equality above rests on.
  torch::manual_seed(3);
  Net c;
  fsdpp::apply_activation_checkpointing(*c, {"NoisyBlock"}, 1, fsdpp::CheckpointOptions{false});
  auto x = torch::randn({5, 6}).requires_grad_(true);
  auto mask = (torch::rand({5, 6}) > 0.2).to(torch::kFloat);
  torch::manual_seed(99);
  c->forward(x, mask).backward();
  EXPECT_FALSE(torch::equal(x.grad(), xa));
}

TEST(Checkpoint, FunctionalFormKeepsOnlyInputs) {
  torch::manual_seed(0);
  auto w = torch::randn({8, 8}).requires_grad_(true);
  auto x = torch::randn({4, 8}).requires_grad_(true);
  auto fn = [&](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{torch::tanh(in[0].matmul(w)).matmul(w)};
  };
  auto ref = fn({x})[0].sum();
  ref.backward();
  auto gw = w.grad().clone(), gx = x.grad().clone();
  w.mutable_grad().zero_();
  x.mutable_grad().zero_();
  auto out = fsdpp::checkpoint(fn, {x});
  // Only the checkpoint node hangs off the output: no matmul/tanh activations are saved.
  EXPECT_NE(out[0].grad_fn()->name().find("CheckpointFn"), std::string::npos) << out[0].grad_fn()->name();
  out[0].sum().backward();
  EXPECT_TRUE(torch::allclose(w.grad(), gw, 0, 0));
  EXPECT_TRUE(torch::allclose(x.grad(), gx, 0, 0));
  // Under no_grad it is a plain call.
  torch::NoGradGuard ng;
  auto plain = fsdpp::checkpoint(fn, {x});
  EXPECT_FALSE(plain[0].requires_grad());
}

TEST(Checkpoint, EveryKAndErrors) {
  Net n;
  EXPECT_EQ(fsdpp::apply_activation_checkpointing(*n, {"NoisyBlock"}, 2),
            (std::vector<std::string>{"blocks.0", "blocks.2"}));
  EXPECT_TRUE(fsdpp::apply_activation_checkpointing(*n, {"NoisyBlock"}, 2).empty());  // idempotent
  EXPECT_THROW(fsdpp::apply_activation_checkpointing(*n, {"NoisyBlock"}, 0), fsdpp::ConfigError);
  EXPECT_THROW(fsdpp::apply_activation_checkpointing(*n, {"NoSuchBlock"}), fsdpp::ConfigError);
}

namespace {

// A residual block whose branch ends in a bias-free tail_linear (fsdp/checkpoint_tail.h).
struct TailBlockImpl : torch::nn::Module {
  TailBlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 12));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(12, 6).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    fsdpp::ResidualTail tail(*this);
    return x + fsdpp::tail_linear(fc2, torch::gelu(fc1(x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TailBlock);

struct TailNetImpl : torch::nn::Module {
  TailNetImpl() {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) blocks->push_back(TailBlock());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x;
    for (size_t i = 0; i < blocks->size(); ++i) h = fsdpp::forward(blocks->ptr<TailBlockImpl>(i), h);
    return h;
  }
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(TailNet);

// Matrix products run (forward and backward), counted through LibTorch's RecordFunction.
std::atomic<int> g_products{0};
std::unique_ptr<at::ObserverContext> count_product(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  if (name == "aten::mm" || name == "aten::addmm") ++g_products;
  return nullptr;
}

struct TailRun {
  std::vector<torch::Tensor> grads;
  int products = 0;
};

// mode 0: plain; 1: every block checkpointed; 2: the whole net checkpointed (an enclosing module).
TailRun tail_run(int mode) {
  torch::manual_seed(5);
  TailNet net;
  if (mode == 1) EXPECT_EQ(fsdpp::apply_activation_checkpointing(*net, {"TailBlock"}).size(), 3u);
  if (mode == 2) EXPECT_TRUE(fsdpp::checkpoint_module(*net));
  auto x = torch::randn({4, 6}).requires_grad_(true);
  g_products = 0;
  auto handle = at::addGlobalCallback(at::RecordFunctionCallback(count_product));
  fsdpp::forward(net, x).square().sum().backward();
  at::removeCallback(handle);
  TailRun r;
  r.products = g_products.load();
  for (const auto& p : net->parameters()) r.grads.push_back(p.grad().clone());
  r.grads.push_back(x.grad().clone());
  return r;
}

}  // namespace

// The block's own recomputation skips fc2's product (one product less per block) and gives the
// gradients of the plain run bit for bit; the recomputation of an enclosing module, whose next
// block reads each block's output, computes it.
TEST(Checkpoint, ResidualTailSkipsTheLastProductInItsOwnRecomputation) {
  const auto plain = tail_run(0), blocks = tail_run(1), whole = tail_run(2);
  // Plain, per block: fc1 and fc2 forward, two products backward each.
  EXPECT_EQ(plain.products, 3 * 6);
  EXPECT_EQ(blocks.products, plain.products + 3 * 1);  // fc1 recomputed, fc2 not
  EXPECT_EQ(whole.products, plain.products + 3 * 2);   // both recomputed
  for (const auto* run : {&blocks, &whole}) {
    ASSERT_EQ(run->grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_TRUE(torch::equal(plain.grads[i], run->grads[i])) << i;
  }
}
