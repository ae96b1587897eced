#pragma once
// Small models that exercise what FSDP must get right: sizes that do not divide by the world
// size, parameters smaller than it, a 0-dim parameter, a frozen parameter beside trainable ones,
// a buffer, a unit called twice in one forward, a unit whose output does not reach the loss.

#include <torch/torch.h>

#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp::test {

struct ScaledLinearImpl : torch::nn::Module {
  ScaledLinearImpl(int64_t in, int64_t out, bool frozen_scale) {
    fc = register_module("fc", torch::nn::Linear(in, out));
    scale = register_parameter("scale", torch::ones({out}) * 0.9, /*requires_grad=*/!frozen_scale);
    shift = register_buffer("shift", torch::full({out}, 0.01));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(fc(x) * scale + shift); }
  torch::nn::Linear fc{nullptr};
  torch::Tensor scale, shift;
};
TORCH_MODULE(ScaledLinear);

struct OddMLPImpl : torch::nn::Module {
  OddMLPImpl() {
    in = register_module("in", ScaledLinear(13, 37, /*frozen_scale=*/true));
    twice = register_module("twice", ScaledLinear(37, 37, false));
    out = register_module("out", ScaledLinear(37, 3, false));
    aux = register_module("aux", ScaledLinear(37, 5, false));
    head = register_module("head", torch::nn::Linear(3, 2));
    temperature = register_parameter("temperature", torch::tensor(1.5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = fsdpp::forward(in, x);
    h = fsdpp::forward(twice, fsdpp::forward(twice, h));  // one unit, two calls
    auto unused = fsdpp::forward(aux, h);                   // never reaches the loss
    (void)unused;
    return head(fsdpp::forward(out, h)) * temperature;
  }
  // Units bottom-up, then the root.
  void shard(const FullyShardOptions& o) {
    fully_shard(in, o);
    fully_shard(twice, o);
    fully_shard(out, o);
    fully_shard(aux, o);
    fully_shard(*this, o);
  }
  ScaledLinear in{nullptr}, twice{nullptr}, out{nullptr}, aux{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor temperature;
};
TORCH_MODULE(OddMLP);

// A tiny transformer: embedding, blocks of (norm, causal self-attention, norm, MLP), head.
struct TinyBlockImpl : torch::nn::Module {
  explicit TinyBlockImpl(int64_t dim, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    // No bias: the key bias has a zero gradient in exact arithmetic (softmax ignores a
    // per-row constant), so Adam would turn its rounding noise into updates and no two
    // reduction orders could agree.
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(dim, 3 * dim).bias(false)));
    proj = register_module("proj", torch::nn::Linear(dim, dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc1 = register_module("fc1", torch::nn::Linear(dim, 3 * dim + 1));
    fc2 = register_module("fc2", torch::nn::Linear(3 * dim + 1, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto q_k_v = qkv(ln1(x)).view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    auto y = at::scaled_dot_product_attention(q_k_v[0], q_k_v[1], q_k_v[2], {}, 0.0, true);
    auto h = x + proj(y.transpose(1, 2).reshape({B, T, C}));
    return h + fc2(torch::gelu(fc1(ln2(h))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyBlock);

struct TinyTransformerImpl : torch::nn::Module {
  TinyTransformerImpl(int64_t vocab, int64_t dim, int64_t heads, int64_t layers) {
    emb = register_module("emb", torch::nn::Embedding(vocab, dim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(TinyBlock(dim, heads));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    lm_head = register_module("lm_head", torch::nn::Linear(dim, vocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto h = emb(tokens);
    for (size_t i = 0; i < blocks->size(); ++i) {
      auto block = blocks->ptr<TinyBlockImpl>(i);
      h = fsdpp::forward(block, h);
    }
    return lm_head(norm(h));
  }
  void shard(const FullyShardOptions& o) {
    for (size_t i = 0; i < blocks->size(); ++i) fully_shard(*blocks->ptr<TinyBlockImpl>(i), o);
    fully_shard(*this, o);
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(TinyTransformer);

}  // namespace fsdpp::test
