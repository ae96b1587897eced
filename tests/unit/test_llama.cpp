#include <gtest/gtest.h>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <string>

#include "../../src/models/decoder_parts.h"
#include "../support/counting_allocator.h"
#include "../support/thread_world.h"
#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/generate.h"
#include "fsdpp/models/llama.h"

using fsdpp::ConfigError;
using namespace fsdpp::models;

namespace {

LlamaConfig tiny(uint64_t seed = 0) {
  auto c = fsdpp::test::tiny_llama(/*n_layers=*/2, /*max_seq_len=*/16, seed);
  c.multiple_of = 16;
  return c;
}

at::Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed = 7) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(V, {B, T}, gen, torch::kLong);
}

std::string error_of(LlamaConfig cfg) {
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Reference attention written another way: complex-number rotary embedding (Meta's
// view_as_complex form), explicit head loops over the kv groups and an explicit causal mask.
at::Tensor reference_attention(AttentionImpl& a, const at::Tensor& x, double theta) {
  const int64_t B = x.size(0), T = x.size(1), H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  auto rope = [&](at::Tensor t) {  // (B,T,h,D)
    auto freqs = 1.0 / torch::pow(theta, torch::arange(0, D, 2, torch::kDouble) / double(D));
    auto angles = torch::outer(torch::arange(T, torch::kDouble), freqs);      // (T,D/2)
    auto rot = torch::polar(torch::ones_like(angles), angles).view({1, T, 1, D / 2});
    auto tc = torch::view_as_complex(t.reshape({B, T, t.size(2), D / 2, 2}).contiguous());
    return torch::view_as_real(tc * rot).reshape({B, T, t.size(2), D});
  };
  auto q = rope(torch::matmul(x, a.wq->weight.t()).view({B, T, H, D}));
  auto k = rope(torch::matmul(x, a.wk->weight.t()).view({B, T, Hkv, D}));
  auto v = torch::matmul(x, a.wv->weight.t()).view({B, T, Hkv, D});
  auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    auto qh = q.select(2, h), kh = k.select(2, g), vh = v.select(2, g);  // (B,T,D)
    auto scores = torch::matmul(qh, kh.transpose(1, 2)) / std::sqrt(double(D));
    scores = scores.masked_fill(mask, -INFINITY);
    heads.push_back(torch::matmul(scores.softmax(-1), vh));
  }
  return torch::matmul(torch::cat(heads, -1), a.wo->weight.t());
}

}  // namespace

TEST(Llama, Shapes) {
  Llama model(tiny());
  auto tokens = random_tokens(2, 8, 64);
  auto logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 8, 64}));
  auto out = model->forward(tokens, random_tokens(2, 8, 64, 8));
  EXPECT_EQ(out.logits.sizes(), logits.sizes());
  EXPECT_EQ(out.loss.dim(), 0);
  EXPECT_TRUE(torch::allclose(out.logits, logits));
}

TEST(Llama, ParameterNames) {
  Llama model(tiny());
  auto params = model->named_parameters();
  for (const char* name :
       {"tok_embeddings.weight", "layers.0.attention.wq.weight", "layers.0.attention.wk.weight",
        "layers.0.attention.wv.weight", "layers.0.attention.wo.weight",
        "layers.1.feed_forward.w1.weight", "layers.1.feed_forward.w2.weight",
        "layers.1.feed_forward.w3.weight", "layers.1.attention_norm.weight",
        "layers.1.ffn_norm.weight", "norm.weight", "output.weight"}) {
    EXPECT_NE(params.find(name), nullptr) << name;
  }
  EXPECT_EQ(params.size(), 1 + 2 * 9 + 2u);
  for (const auto& b : model->named_buffers()) EXPECT_TRUE(is_non_persistent_buffer(b.key()));
}

TEST(Llama, Causal) {
  Llama model(tiny());
  auto tokens = random_tokens(2, 12, 64);
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 7}, (tokens.select(1, 7) + 1) % 64);
  auto a = model->forward(tokens), b = model->forward(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(a.index({Slice(), Slice(0, 7)}), b.index({Slice(), Slice(0, 7)})));
  EXPECT_FALSE(torch::allclose(a.index({Slice(), Slice(7)}), b.index({Slice(), Slice(7)})));
}

TEST(Llama, SeedDeterminesWeights) {
  Llama a(tiny(1)), b(tiny(1)), c(tiny(2));
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    if (p.key().find("norm") == std::string::npos) {
      EXPECT_FALSE(torch::equal(p.value(), pc[p.key()])) << p.key();
    }
  }
  // The residual projections are drawn with std / sqrt(2 * n_layers).
  auto std_of = [&](const char* n) { return pa[n].std().item<double>(); };
  EXPECT_NEAR(std_of("layers.0.attention.wq.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("layers.0.feed_forward.w2.weight"), 0.02 / 2.0, 0.001);
}

TEST(Llama, LeavesGlobalRngAlone) {
  torch::manual_seed(123);
  auto expected = torch::rand({4});
  torch::manual_seed(123);
  Llama model(tiny());
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

TEST(Llama, ParameterCountMatchesFormula) {
  for (int64_t kv : {0, 2, 1}) {
    for (bool tied : {false, true}) {
      auto cfg = tiny();
      cfg.n_kv_heads = kv;
      cfg.tie_embeddings = tied;
      Llama model(cfg);
      const int64_t V = 64, C = 32, L = 2, Dh = 8, Hkv = kv == 0 ? 4 : kv;
      const int64_t F = 96;  // 2/3 * 4 * 32 = 85, rounded up to a multiple of 16
      EXPECT_EQ(cfg.ffn_hidden_dim(), F);
      const int64_t per_layer = C * C + 2 * C * Hkv * Dh + C * C + 3 * C * F + 2 * C;
      EXPECT_EQ(num_parameters(*model), V * C + L * per_layer + C + (tied ? 0 : V * C));
    }
  }
}

TEST(Llama, FfnHiddenRule) {
  LlamaConfig cfg{.dim = 4096, .n_heads = 32, .multiple_of = 256};
  EXPECT_EQ(cfg.ffn_hidden_dim(), 11008);  // Llama-2 7B
  cfg.ffn_hidden = 1000;
  EXPECT_EQ(cfg.ffn_hidden_dim(), 1000);
}

TEST(Llama, AttentionMatchesReference) {
  torch::NoGradGuard no_grad;
  for (int64_t kv : {4, 2, 1}) {
    auto cfg = tiny();
    cfg.n_kv_heads = kv;
    cfg.rope_theta = 500;  // large angles at short lengths
    Llama model(cfg);
    model->to(torch::kDouble);
    auto& attn = *model->layers->ptr<TransformerBlockImpl>(0)->attention;
    auto x = torch::randn({2, 10, 32}, torch::kDouble);
    auto expected = reference_attention(attn, x, cfg.rope_theta);
    EXPECT_TRUE(torch::allclose(attn.forward(x), expected, 1e-9, 1e-10)) << "n_kv_heads=" << kv;
  }
}

TEST(Llama, GroupedQueryEqualsRepeatedHeads) {
  // A GQA model equals the multi-head model whose k/v heads are copies of the shared ones.
  torch::NoGradGuard no_grad;
  auto gqa_cfg = tiny();
  gqa_cfg.n_kv_heads = 2;
  Llama gqa(gqa_cfg);
  Llama mha(tiny(99));
  EXPECT_EQ(gqa->layers->ptr<TransformerBlockImpl>(0)->attention->wk->weight.size(0), 2 * 8);
  auto src = gqa->named_parameters();
  for (auto& p : mha->named_parameters()) {
    auto w = src[p.key()];
    if (p.key().ends_with("wk.weight") || p.key().ends_with("wv.weight")) {
      w = w.view({2, 8, 32}).repeat_interleave(2, 0).reshape({32, 32});
    }
    p.value().copy_(w);
  }
  auto tokens = random_tokens(2, 9, 64);
  EXPECT_TRUE(torch::allclose(gqa->forward(tokens), mha->forward(tokens), 1e-5, 1e-6));
}

TEST(Llama, TiedEmbeddings) {
  auto cfg = tiny();
  cfg.tie_embeddings = true;
  Llama tied(cfg);
  Llama untied(tiny());
  EXPECT_EQ(tied->parameters().size() + 1, untied->parameters().size());
  EXPECT_FALSE(tied->output);
  EXPECT_EQ(tied->named_parameters().find("output.weight"), nullptr);
  // The logits are the final hidden state against the embedding table itself.
  auto tokens = random_tokens(1, 5, 64);
  auto out = tied->forward(tokens, tokens);
  out.loss.backward();
  auto g = tied->tok_embeddings->weight.grad();
  ASSERT_TRUE(g.defined());
  // Every row gets gradient through the output projection, not only the 5 looked-up tokens.
  EXPECT_EQ((g.abs().sum(1) > 0).sum().item<int64_t>(), 64);
}

TEST(Llama, InitialLossIsLogVocab) {
  auto cfg = tiny();
  cfg.vocab_size = 512;
  Llama model(cfg);
  auto out = model->forward(random_tokens(4, 16, 512), random_tokens(4, 16, 512, 9));
  EXPECT_NEAR(out.loss.item<double>(), std::log(512.0), 0.3);
}

TEST(Llama, LossIgnoresMinus100) {
  Llama model(tiny());
  auto tokens = random_tokens(2, 8, 64);
  auto targets = random_tokens(2, 8, 64, 3);
  auto masked = targets.clone();
  masked.index_put_({torch::indexing::Slice(), torch::indexing::Slice(4)}, -100);
  auto full = model->forward(tokens, targets);
  auto part = model->forward(tokens, masked);
  using torch::indexing::Slice;
  auto expected = token_cross_entropy(full.logits.index({Slice(), Slice(0, 4)}),
                                      targets.index({Slice(), Slice(0, 4)}));
  EXPECT_NEAR(part.loss.item<double>(), expected.item<double>(), 1e-6);
}

TEST(Llama, InvalidConfigNamesTheField) {
  auto with = [](auto change) {
    auto cfg = tiny();
    change(cfg);
    return error_of(cfg);
  };
  EXPECT_EQ(error_of(tiny()), "");
  auto e = with([](LlamaConfig& c) { c.dim = 30; });
  EXPECT_NE(e.find("[models] LlamaConfig.dim=30 is not divisible by n_heads=4"), std::string::npos)
      << e;
  e = with([](LlamaConfig& c) { c.n_kv_heads = 3; });
  EXPECT_NE(e.find("n_kv_heads=3 does not divide n_heads=4"), std::string::npos) << e;
  e = with([](LlamaConfig& c) { c.vocab_size = 0; });
  EXPECT_NE(e.find("vocab_size=0"), std::string::npos) << e;
  e = with([](LlamaConfig& c) { c.dim = 12; });  // head_dim 3
  EXPECT_NE(e.find("head_dim=3, which is odd"), std::string::npos) << e;
  e = with([](LlamaConfig& c) { c.norm_eps = 0; });
  EXPECT_NE(e.find("norm_eps=0"), std::string::npos) << e;
  e = with([](LlamaConfig& c) { c.n_layers = -1; });
  EXPECT_NE(e.find("n_layers=-1"), std::string::npos) << e;
  EXPECT_THROW(Llama(LlamaConfig{.dim = 30, .n_heads = 4}), ConfigError);
  // A sequence longer than max_seq_len has no rotary angles.
  Llama model(tiny());
  EXPECT_THROW(model->forward(random_tokens(1, 17, 64)), ConfigError);
}

TEST(Llama, RMSNormGradientMatchesFiniteDifferences) {
  RMSNorm norm(5, 1e-5);
  norm->to(torch::kDouble);
  torch::NoGradGuard setup;
  norm->weight.copy_(torch::randn({5}, torch::kDouble));
  auto x = torch::randn({3, 5}, torch::kDouble);
  auto r = torch::randn({3, 5}, torch::kDouble);  // a random projection makes a scalar loss
  auto loss_of = [&](const at::Tensor& input) { return (norm->forward(input) * r).sum(); };

  at::Tensor gx, gw;
  {
    torch::AutoGradMode grad(true);
    auto xg = x.clone().requires_grad_(true);
    norm->weight.mutable_grad() = at::Tensor();
    loss_of(xg).backward();
    gx = xg.grad();
    gw = norm->weight.grad();
  }
  const double h = 1e-6;
  auto numeric = [&](at::Tensor& t) {
    auto g = torch::zeros_like(t);
    auto flat = t.view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double v = flat[i].item<double>();
      flat[i] = v + h;
      const double up = loss_of(x).item<double>();
      flat[i] = v - h;
      const double down = loss_of(x).item<double>();
      flat[i] = v;
      g.view({-1})[i] = (up - down) / (2 * h);
    }
    return g;
  };
  EXPECT_TRUE(torch::allclose(gx, numeric(x), 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(gw, numeric(norm->weight), 1e-6, 1e-7));
}

// RoPE on a GPU is one complex multiply (decoder_parts.h); on the CPU the real formula. Both
// rotate the same pairs by the same angles: values and gradients agree, exactly up to rounding.
TEST(Llama, RopeAsComplexMultiplyEqualsThePairsFormula) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const auto o = torch::TensorOptions().dtype(dtype);
    auto angles = torch::randn({1, 5, 1, 4}, o) * 3;
    auto c = angles.cos(), s = angles.sin();
    auto x = torch::randn({2, 5, 3, 4, 2}, o);
    auto r = torch::randn({2, 5, 3, 8}, o);  // a random projection makes a scalar loss
    std::vector<at::Tensor> values, grads;
    for (auto* rotate : {&fsdpp::models::detail::rotate_pairs, &fsdpp::models::detail::rotate_pairs_complex}) {
      auto xg = x.clone().requires_grad_(true);
      auto out = (*rotate)(xg, c, s);
      ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 5, 3, 8}));
      (out * r).sum().backward();
      values.push_back(out.detach());
      grads.push_back(xg.grad());
    }
    const double tol = dtype == torch::kDouble ? 1e-14 : 1e-6;
    EXPECT_TRUE(torch::allclose(values[0], values[1], tol, tol)) << (values[0] - values[1]).abs().max();
    EXPECT_TRUE(torch::allclose(grads[0], grads[1], tol, tol)) << (grads[0] - grads[1]).abs().max();
    // The rotation itself (not a formula both paths could get wrong alike): pair 0 of position
    // 0 of head 0 turned by its angle.
    const double a = angles[0][0][0][0].item<double>(), x0 = x[0][0][0][0][0].item<double>(),
                 x1 = x[0][0][0][0][1].item<double>();
    EXPECT_NEAR(values[1][0][0][0][0].item<double>(), x0 * std::cos(a) - x1 * std::sin(a), tol * 10);
    EXPECT_NEAR(values[1][0][0][0][1].item<double>(), x0 * std::sin(a) + x1 * std::cos(a), tol * 10);
  }
}

TEST(Llama, GenerateGreedyAndSampled) {
  Llama model(tiny());
  auto prompt = torch::tensor({1, 2, 3}, torch::kLong);
  auto greedy = generate(model, prompt, 20, /*temperature=*/0.0);
  ASSERT_EQ(greedy.sizes(), (std::vector<int64_t>{23}));  // past max_seq_len: context is cropped
  EXPECT_TRUE(torch::equal(greedy.narrow(0, 0, 3), prompt));
  EXPECT_TRUE(torch::equal(greedy, generate(model, prompt, 20, 0.0)));
  // The greedy next token is the argmax of the model's last logits.
  auto first = model->forward(prompt.unsqueeze(0)).select(1, -1).argmax(-1);
  EXPECT_EQ(greedy[3].item<int64_t>(), first.item<int64_t>());

  auto sample = [&](uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return generate(model, prompt.repeat({2, 1}), 6, 1.0, /*top_k=*/5, gen);
  };
  auto s1 = sample(1);
  EXPECT_EQ(s1.sizes(), (std::vector<int64_t>{2, 9}));
  EXPECT_TRUE(torch::equal(s1, sample(1)));
  EXPECT_TRUE(((s1 >= 0) & (s1 < 64)).all().item<bool>());
}

// allowed_vocab: ids at or past it are never drawn, greedy or sampled, even where the model
// puts its largest logits (a model with more embedding rows than its tokenizer has tokens).
TEST(Llama, GenerateDrawsOnlyAllowedIds) {
  const int64_t V = 64, allowed = 40;
  auto last_logits = [&](const at::Tensor& ctx) {
    auto l = torch::zeros({ctx.size(0), V});
    l.narrow(1, allowed, V - allowed).fill_(50.0);  // the rows past the tokenizer win
    l.select(1, 7).fill_(1.0);
    return l;
  };
  auto prompt = torch::tensor({1, 2}, torch::kLong);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.temperature = 0;
  EXPECT_GE(sample_tokens(last_logits, {.max_seq_len = 8, .vocab_size = V}, prompt, o)[2].item<int64_t>(),
            allowed);  // without the limit: a row past it
  o.allowed_vocab = allowed;
  auto greedy = sample_tokens(last_logits, {.max_seq_len = 8, .vocab_size = V}, prompt, o);
  EXPECT_TRUE((greedy.narrow(0, 2, 30) == 7).all().item<bool>());
  o.temperature = 1.0;
  o.top_k = 50;
  o.generator = at::make_generator<at::CPUGeneratorImpl>(3);
  auto sampled = sample_tokens(last_logits, {.max_seq_len = 8, .vocab_size = V},
                                       prompt.repeat({4, 1}), o);
  EXPECT_TRUE((sampled.narrow(1, 2, 30) < allowed).all().item<bool>());
}

TEST(Llama, ShardedOverTwoRanksMatchesOneProcess) {
  // Blocks and root made FSDP units: the loss, and the loss after one SGD step on the
  // reduce-scattered gradients, equal the single-process model's (both ranks see one batch).
  for (bool tied : {false, true}) {
    auto cfg = tiny();
    cfg.n_kv_heads = 2;
    cfg.tie_embeddings = tied;
    auto tokens = random_tokens(2, 10, 64), targets = random_tokens(2, 10, 64, 8);
    Llama ref(cfg);
    torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.5));
    auto ref_out = ref->forward(tokens, targets);
    ref_out.loss.backward();
    ref_opt.step();
    const double ref_after = ref->forward(tokens, targets).loss.item<double>();
    ASSERT_LT(ref_after, ref_out.loss.item<double>() - 0.01);  // the step moved the weights

    fsdpp::test::run_ranks(2, [&](fsdpp::dist::World& world) {
      Llama model(cfg);
      fsdpp::FullyShardOptions opts;
      opts.mesh = world.mesh();
      for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
      fsdpp::fully_shard(model, opts);
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
      auto out = fsdpp::forward(model, tokens, targets);
      EXPECT_NEAR(out.loss.item<double>(), ref_out.loss.item<double>(), 1e-5);
      EXPECT_TRUE(torch::allclose(out.logits, ref_out.logits, 1e-4, 1e-5));
      out.loss.backward();
      opt.step();
      opt.zero_grad();
      EXPECT_NEAR(fsdpp::forward(model, tokens, targets).loss.item<double>(), ref_after, 1e-5)
          << "tied=" << tied;
    });
  }
}

namespace {
std::atomic<int> g_llama_products{0};
std::unique_ptr<at::ObserverContext> count_llama_product(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  if (name == "aten::mm" || name == "aten::addmm" || name == "aten::bmm") ++g_llama_products;
  return nullptr;
}
}  // namespace

// Checkpointed blocks, as an FSDP unit each and not: the gradients of the plain model bit for
// bit, and each block's recomputation runs its six projections but not w2 (the residual tail,
// fsdp/checkpoint_tail.h): 6 products per layer more than the plain step, not 7.
TEST(Llama, CheckpointedBlocksRecomputeAllButTheLastProjection) {
  const auto cfg = tiny();
  const auto tokens = random_tokens(2, 10, 64), targets = random_tokens(2, 10, 64, 8);
  // world: FSDP units on one rank (the gathered parameters point into the converted shard).
  auto run = [&](bool checkpointed, fsdpp::dist::World* world, int* products) {
    Llama model(cfg);
    if (checkpointed) EXPECT_EQ(fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"}).size(), 2u);
    if (world) {
      fsdpp::FullyShardOptions opts;
      opts.mesh = world->mesh();
      for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
      fsdpp::fully_shard(model, opts);
    }
    g_llama_products = 0;
    auto handle = at::addGlobalCallback(at::RecordFunctionCallback(count_llama_product));
    fsdpp::forward(model, tokens, targets).loss.backward();
    at::removeCallback(handle);
    *products = g_llama_products.load();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  int plain_products = 0;
  const auto plain = run(false, nullptr, &plain_products);
  auto check = [&](fsdpp::dist::World* world) {
    int products = 0;
    const auto grads = run(true, world, &products);
    EXPECT_EQ(products, plain_products + 6 * cfg.n_layers) << "sharded=" << (world != nullptr);
    ASSERT_EQ(grads.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], plain[i])) << i;
  };
  check(nullptr);
  fsdpp::test::run_ranks(1, [&](fsdpp::dist::World& world) { check(&world); });
}

// Selective checkpointing (CheckpointOptions::keep_products): the blocks keep their projections'
// products, so the recomputation multiplies nothing (the plain step's products exactly), the
// gradients are the plain model's bit for bit, as an FSDP unit each and not, and what forward
// leaves for backward lies between full checkpointing's and none's.
TEST(Llama, SelectiveCheckpointingKeepsTheProducts) {
  auto cfg = tiny();
  const auto tokens = random_tokens(4, 16, 64), targets = random_tokens(4, 16, 64, 8);
  // mode 0: none, 1: full, 2: selective. Returns the gradients; products and the bytes live
  // between forward and backward (what forward left for backward) through the pointers.
  auto run = [&](int mode, fsdpp::dist::World* world, int* products, int64_t* saved_bytes) {
    Llama model(cfg);
    if (mode > 0) {
      EXPECT_EQ(fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"}, 1,
                                                      {.keep_products = mode == 2})
                    .size(),
                2u);
    }
    if (world) {
      fsdpp::FullyShardOptions opts;
      opts.mesh = world->mesh();
      for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
      fsdpp::fully_shard(model, opts);
    }
    g_llama_products = 0;
    auto handle = at::addGlobalCallback(at::RecordFunctionCallback(count_llama_product));
    at::Tensor loss;
    {
      fsdpp::test::CountingScope counting;
      fsdpp::test::tl_rank = 0;
      const int64_t before = counting.counter().live(0);
      loss = fsdpp::forward(model, tokens, targets).loss;
      *saved_bytes = counting.counter().live(0) - before;
      fsdpp::test::tl_rank = -1;
    }
    loss.backward();
    at::removeCallback(handle);
    *products = g_llama_products.load();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  int64_t plain_bytes = 0, full_bytes = 0;
  int plain_products = 0, full_products = 0;
  const auto plain = run(0, nullptr, &plain_products, &plain_bytes);
  run(1, nullptr, &full_products, &full_bytes);
  auto check = [&](fsdpp::dist::World* world) {
    int products = 0;
    int64_t bytes = 0;
    const auto grads = run(2, world, &products, &bytes);
    EXPECT_EQ(products, plain_products) << "sharded=" << (world != nullptr);
    ASSERT_EQ(grads.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], plain[i])) << i;
    if (!world) {
      EXPECT_LT(bytes, plain_bytes);
      EXPECT_GT(bytes, full_bytes);
      std::printf("saved for backward: none %lld, selective %lld, full %lld bytes\n",
                  static_cast<long long>(plain_bytes), static_cast<long long>(bytes),
                  static_cast<long long>(full_bytes));
    }
  };
  check(nullptr);
  fsdpp::test::run_ranks(1, [&](fsdpp::dist::World& world) { check(&world); });
}

// One rank with bf16 parameters: the gathered parameters point into the converted shard instead
// of a copy of it (fsdp_unit.cpp, can_alias). The step equals the model converted to bf16 bit
// for bit (its gradients converted to float32, where FSDP reduces), checkpointed or not.
TEST(Llama, OneRankBf16UnitsEqualTheModelInBf16) {
  const auto cfg = tiny();
  const auto tokens = random_tokens(2, 10, 64), targets = random_tokens(2, 10, 64, 8);
  Llama ref(cfg);
  {
    torch::NoGradGuard no_grad;  // the parameters in bf16; the rotary tables stay float32, as FSDP's
    for (auto& p : ref->parameters()) p.set_data(p.to(torch::kBFloat16));
  }
  auto ref_out = ref->forward(tokens, targets);
  ref_out.loss.backward();
  fsdpp::test::run_ranks(1, [&](fsdpp::dist::World& world) {
    for (bool checkpointed : {false, true}) {
      Llama model(cfg);
      if (checkpointed) fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"});
      fsdpp::FullyShardOptions opts;
      opts.mesh = world.mesh();
      opts.mp_policy.param_dtype = torch::kBFloat16;
      opts.mp_policy.reduce_dtype = torch::kFloat;
      for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
      fsdpp::fully_shard(model, opts);
      auto out = fsdpp::forward(model, tokens, targets);
      EXPECT_TRUE(torch::equal(out.logits, ref_out.logits)) << "checkpointed=" << checkpointed;
      out.loss.backward();
      const auto params = model->parameters(), ref_params = ref->parameters();
      ASSERT_EQ(params.size(), ref_params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i].grad().scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::equal(params[i].grad(), ref_params[i].grad().to(torch::kFloat)))
            << i << " checkpointed=" << checkpointed;
      }
    }
  });
}
