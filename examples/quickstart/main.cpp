// fsdpp quickstart: a small causal transformer learns to continue arithmetic sequences
// (x_t = a + b*t mod 16), sharded over the ranks
// that fsdpp-run starts. This file is the README's example, compiled and run by `make run`.
//
//   fsdpp-run --nproc-per-node 2 build/bin/fsdpp-quickstart [steps]
#include <fsdpp/dist/world.h>
#include <fsdpp/fsdp/fully_shard.h>
#include <fsdpp/fsdp/inspect.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t dim, int64_t heads) : heads(heads) {
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(dim, 3 * dim).bias(false)));
    proj = register_module("proj", torch::nn::Linear(dim, dim));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc1 = register_module("fc1", torch::nn::Linear(dim, 4 * dim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto q_k_v = qkv(norm1(x)).view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    auto y = at::scaled_dot_product_attention(q_k_v[0], q_k_v[1], q_k_v[2], {}, 0.0, /*is_causal=*/true);
    auto h = x + proj(y.transpose(1, 2).reshape({B, T, C}));
    return h + fc2(torch::gelu(fc1(norm2(h))));
  }
  int64_t heads;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct ModelImpl : torch::nn::Module {
  ModelImpl(int64_t vocab, int64_t dim, int64_t heads, int64_t layers, int64_t seq) {
    tok = register_module("tok", torch::nn::Embedding(vocab, dim));
    pos = register_parameter("pos", torch::randn({seq, dim}) * 0.02);
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(Block(dim, heads));
    head = register_module("head", torch::nn::Linear(dim, vocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto h = tok(tokens) + pos.narrow(0, 0, tokens.size(1));
    for (size_t i = 0; i < blocks->size(); ++i) {
      h = fsdpp::forward(blocks->ptr<BlockImpl>(i), h);  // a unit: gathered, run, freed
    }
    return head(h);
  }
  torch::nn::Embedding tok{nullptr};
  torch::Tensor pos;
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Model);

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 300;
  auto world = fsdpp::dist::init_from_env();  // RANK, WORLD_SIZE, ... from fsdpp-run

  torch::manual_seed(0);  // the same initial weights on every rank
  const int64_t vocab = 16, seq = 12, batch_per_rank = 16;
  Model model(vocab, 64, 4, 4, seq);

  fsdpp::FullyShardOptions opts;
  opts.mesh = world->mesh();
  opts.strategy = fsdpp::ShardingStrategy::FULL_SHARD;
  for (size_t i = 0; i < model->blocks->size(); ++i) {
    fsdpp::fully_shard(*model->blocks->ptr<BlockImpl>(i), opts);  // units, bottom-up
  }
  fsdpp::fully_shard(model, opts);  // the root

  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));  // shards
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + world->rank());  // rank's own data
  for (int step = 1; step <= steps; ++step) {
    auto a = torch::randint(0, vocab, {batch_per_rank, 1}, gen);
    auto b = torch::randint(1, vocab, {batch_per_rank, 1}, gen);
    auto sequence = (a + b * torch::arange(seq + 1)) % vocab;  // (B, seq+1)
    auto x = sequence.narrow(1, 0, seq);
    auto target = sequence.narrow(1, 1, seq);  // the next token
    auto logits = fsdpp::forward(model, x);
    auto loss = torch::cross_entropy_loss(logits.reshape({-1, vocab}), target.reshape({-1}));
    loss.backward();
    const double norm = fsdpp::clip_grad_norm_(*model, 1.0);
    opt.step();
    opt.zero_grad();
    if (world->rank() == 0 && (step % 25 == 0 || step == 1)) {
      std::printf("step %4d  loss %.4f  grad_norm %.3f\n", step, loss.item<double>(), norm);
      std::fflush(stdout);
    }
  }
  if (world->rank() == 0) {
    int64_t shard = 0, full = 0;
    for (const auto& u : fsdpp::inspect_units(*model)) {
      shard += u.shard_numel;
      full += u.numel;
    }
    std::printf("done: %d ranks, %lld parameters, %lld held per rank (%.0f%%), %.1f MB sent per rank\n",
                world->size(), static_cast<long long>(full), static_cast<long long>(shard),
                100.0 * shard / full, fsdpp::comm_counters(*model).total_bytes() / 1e6);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
