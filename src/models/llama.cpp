#include "fsdpp/models/llama.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/options/loss.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>
#include <unordered_set>

#include "fsdpp/common/error.h"
#include "decoder_parts.h"
#include "fsdpp/fsdp/checkpoint_tail.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "meta_modules.h"

namespace fsdpp::models {
namespace {

// Every block runs through here so that a block made an FSDP unit gathers its parameters. With
// document masking the positions and the mask are arguments, so that activation checkpointing
// keeps them for the recomputation.
at::Tensor run_block(TransformerBlockImpl& block, const at::Tensor& x, const at::Tensor& positions,
                     const at::Tensor& mask) {
  return positions.defined() ? fsdpp::forward(block, x, positions, mask) : fsdpp::forward(block, x);
}

using detail::compute_dtype;

// Rotates each interleaved pair (x[2i], x[2i+1]) of every head by angle t * theta^(-2i/D), for
// positions t = start .. start + T - 1.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                      int64_t start = 0) {
  // x: (B,T,H,D); cos, sin: (max_seq_len, D/2)
  const int64_t T = x.size(1), half = x.size(3) / 2;
  FSDPP_CHECK_AS(ConfigError, start + T <= cos.size(0),
                 "[models] Llama positions {} .. {} are beyond max_seq_len={}", start,
                 start + T - 1, cos.size(0));
  auto xc = x.to(compute_dtype(x)).unflatten(-1, {half, 2});  // (B,T,H,D/2,2)
  auto c = cos.narrow(0, start, T).view({1, T, 1, half}).to(xc.scalar_type());
  auto s = sin.narrow(0, start, T).view({1, T, 1, half}).to(xc.scalar_type());
  const auto out = x.is_cuda() ? detail::rotate_pairs_complex(xc, c, s) : detail::rotate_pairs(xc, c, s);
  return out.to(x.scalar_type());
}

// The same with each token at its own position (B,T) (document masking): the table's rows at the
// positions, which the model checked against max_seq_len.
at::Tensor apply_rope_at(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& positions) {
  auto xc = x.to(compute_dtype(x)).unflatten(-1, {x.size(3) / 2, 2});  // (B,T,H,D/2,2)
  auto c = detail::rows_at(cos, positions).unsqueeze(2).to(xc.scalar_type());  // (B,T,1,D/2)
  auto s = detail::rows_at(sin, positions).unsqueeze(2).to(xc.scalar_type());
  const auto out = x.is_cuda() ? detail::rotate_pairs_complex(xc, c, s) : detail::rotate_pairs(xc, c, s);
  return out.to(x.scalar_type());
}

void check_positive(std::string_view field, int64_t value) {
  detail::check_positive("LlamaConfig", field, value);
}

}  // namespace

void LlamaConfig::validate() const {
  check_positive("vocab_size", vocab_size);
  check_positive("dim", dim);
  check_positive("n_layers", n_layers);
  check_positive("n_heads", n_heads);
  check_positive("max_seq_len", max_seq_len);
  check_positive("multiple_of", multiple_of);
  FSDPP_CHECK_AS(ConfigError, n_kv_heads >= 0,
                 "[models] LlamaConfig.n_kv_heads={} is negative; expected 0 (= n_heads) or a "
                 "divisor of n_heads={}",
                 n_kv_heads, n_heads);
  FSDPP_CHECK_AS(ConfigError, ffn_hidden >= 0,
                 "[models] LlamaConfig.ffn_hidden={} is negative; expected 0 (Llama's rule) or > 0",
                 ffn_hidden);
  FSDPP_CHECK_AS(ConfigError, dim % n_heads == 0,
                 "[models] LlamaConfig.dim={} is not divisible by n_heads={}; expected dim % "
                 "n_heads == 0",
                 dim, n_heads);
  FSDPP_CHECK_AS(ConfigError, head_dim() % 2 == 0,
                 "[models] LlamaConfig.dim={} / n_heads={} gives head_dim={}, which is odd; "
                 "rotary embedding needs an even head_dim",
                 dim, n_heads, head_dim());
  FSDPP_CHECK_AS(ConfigError, n_heads % kv_heads() == 0,
                 "[models] LlamaConfig.n_kv_heads={} does not divide n_heads={}; expected n_heads "
                 "% n_kv_heads == 0",
                 n_kv_heads, n_heads);
  detail::check_positive_number("LlamaConfig", "norm_eps", norm_eps);
  detail::check_positive_number("LlamaConfig", "rope_theta", rope_theta);
  FSDPP_CHECK_AS(ConfigError, init_std >= 0 && std::isfinite(init_std),
                 "[models] LlamaConfig.init_std={} is not a number >= 0; expected >= 0", init_std);
}

int64_t LlamaConfig::ffn_hidden_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  const int64_t hidden = 2 * (4 * dim) / 3;
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

// ---- Attention ----

namespace {

DecoderAttentionOptions attention_options(const LlamaConfig& cfg) {
  return {.dim = cfg.dim,
          .n_heads = cfg.n_heads,
          .n_kv_heads = cfg.kv_heads(),
          .head_dim = cfg.head_dim(),
          .names = {"wq", "wk", "wv", "wo"},
          .where = "attention"};
}

}  // namespace

AttentionImpl::AttentionImpl(const LlamaConfig& cfg, at::Device device)
    : DecoderAttentionImpl(attention_options(cfg), device),
      wq(q_proj), wk(k_proj), wv(v_proj), wo(o_proj) {
  // Angles in double, stored in float32: position t, pair i -> t * theta^(-2i/D).
  auto i = torch::arange(0, head_dim, 2, torch::kDouble);                   // (D/2)
  auto inv_freq = torch::pow(cfg.rope_theta, -i / static_cast<double>(head_dim));
  auto t = torch::arange(cfg.max_seq_len, torch::kDouble);                  // (T)
  auto angles = torch::outer(t, inv_freq);                                  // (T, D/2)
  rope_cos = register_buffer("rope_cos", angles.cos().to(torch::kFloat));
  rope_sin = register_buffer("rope_sin", angles.sin().to(torch::kFloat));
}

at::Tensor AttentionImpl::forward(const at::Tensor& input) { return forward(input, {}, {}); }

at::Tensor AttentionImpl::forward(const at::Tensor& input, const at::Tensor& positions,
                                  const at::Tensor& mask) {
  if (positions.defined()) {
    return attend(input, [&](const at::Tensor& x) { return apply_rope_at(x, rope_cos, rope_sin, positions); },
                  mask);
  }
  return attend(input, [&](const at::Tensor& x) { return apply_rope(x, rope_cos, rope_sin); }, mask);
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, KVCache::Layer& cache) {
  FSDPP_CHECK(!parallel, "[models] Llama attention with a KV cache under tensor parallelism is "
                         "not supported; sample without the cache");
  const int64_t start = cache.k.defined() ? cache.k.size(2) : 0;
  return attend_cached(x, [&](const at::Tensor& t) { return apply_rope(t, rope_cos, rope_sin, start); },
                       cache);
}

// ---- FeedForward ----

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden, at::Device device)
    : SwiGLUImpl({.dim = dim, .hidden = hidden, .gate = "w1", .up = "w3", .down = "w2",
                  .down_before_up = true, .where = "feed_forward"},
                 device),
      w1(gate_proj), w2(down_proj), w3(up_proj) {}

// ---- TransformerBlock ----

TransformerBlockImpl::TransformerBlockImpl(const LlamaConfig& cfg, at::Device device) {
  attention_norm = register_module("attention_norm", RMSNorm(cfg.dim, cfg.norm_eps, device));
  attention = register_module("attention", Attention(cfg, device));
  ffn_norm = register_module("ffn_norm", RMSNorm(cfg.dim, cfg.norm_eps, device));
  feed_forward = register_module("feed_forward", FeedForward(cfg.dim, cfg.ffn_hidden_dim(), device));
}

// attention and feed_forward go through fsdpp::forward too, so that a size-based wrap policy
// may make them units of their own (a plain call when they are not).
at::Tensor TransformerBlockImpl::forward(const at::Tensor& x) { return forward(x, {}, {}); }

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& positions,
                                         const at::Tensor& mask) {
  const auto normed = attention_norm(x);
  auto h = x + (positions.defined() ? fsdpp::forward(attention, normed, positions, mask)
                                    : fsdpp::forward(attention, normed));
  fsdpp::ResidualTail tail(*this);  // feed_forward ends in tail_linear (fsdp/checkpoint_tail.h)
  return h + fsdpp::forward(feed_forward, ffn_norm(h));
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x, KVCache::Layer& cache) {
  auto h = x + fsdpp::forward(attention, attention_norm(x), cache);
  return h + fsdpp::forward(feed_forward, ffn_norm(h));
}

// ---- Llama ----

LlamaImpl::LlamaImpl(const LlamaConfig& cfg, at::Device device) : cfg_(cfg) {
  cfg_.validate();
  detail::GlobalRngRestorer restore_global_rng;
  tok_embeddings = register_module("tok_embeddings", detail::make_embedding(cfg.vocab_size, cfg.dim, device));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) layers->push_back(TransformerBlock(cfg_, device));
  norm = register_module("norm", RMSNorm(cfg.dim, cfg.norm_eps, device));
  if (!cfg.tie_embeddings) {
    output = register_module("output", detail::make_linear(cfg.dim, cfg.vocab_size, device));
  }
  // The draws, in order. Residual projections are scaled down so the residual stream's
  // variance does not grow with depth (GPT-2).
  const double residual_std = cfg_.init_std / std::sqrt(2.0 * static_cast<double>(cfg_.n_layers));
  plan_.seed = cfg_.seed;
  auto normal = [&](const std::string& name, const at::Tensor& w, double std) {
    plan_.params.push_back({.name = name, .shape = w.sizes().vec(), .std = std});
  };
  auto ones = [&](const std::string& name, const at::Tensor& w) {
    plan_.params.push_back({.name = name, .shape = w.sizes().vec(), .kind = ParamInit::Kind::FILL, .value = 1.0});
  };
  normal("tok_embeddings.weight", tok_embeddings->weight, cfg_.init_std);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& block = *layers->ptr<TransformerBlockImpl>(i);
    const std::string p = fmt::format("layers.{}.", i);
    normal(p + "attention.wq.weight", block.attention->wq->weight, cfg_.init_std);
    normal(p + "attention.wk.weight", block.attention->wk->weight, cfg_.init_std);
    normal(p + "attention.wv.weight", block.attention->wv->weight, cfg_.init_std);
    normal(p + "attention.wo.weight", block.attention->wo->weight, residual_std);
    normal(p + "feed_forward.w1.weight", block.feed_forward->w1->weight, cfg_.init_std);
    normal(p + "feed_forward.w3.weight", block.feed_forward->w3->weight, cfg_.init_std);
    normal(p + "feed_forward.w2.weight", block.feed_forward->w2->weight, residual_std);
    ones(p + "attention_norm.weight", block.attention_norm->weight);
    ones(p + "ffn_norm.weight", block.ffn_norm->weight);
  }
  ones("norm.weight", norm->weight);
  if (output) normal("output.weight", output->weight, cfg_.init_std);
  if (device.is_meta()) return;
  init_weights();
  detail::place_on(*this, device);
}

void LlamaImpl::init_weights() { detail::draw_weights(*this, plan_); }

at::Tensor LlamaImpl::hidden_to_logits(const at::Tensor& tokens,
                                       const std::vector<int64_t>& hidden_layers,
                                       std::vector<at::Tensor>* hidden, KVCache* cache,
                                       const at::Tensor& positions_in) {
  FSDPP_CHECK_AS(ConfigError, tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                 "[models] Llama tokens must be (B,T) int64; got {} dims of {}", tokens.dim(),
                 c10::toString(tokens.scalar_type()));
  const int64_t start = cache ? cache->length : 0;
  FSDPP_CHECK_AS(ConfigError, tokens.size(1) >= 1 && start + tokens.size(1) <= cfg_.max_seq_len,
                 "[models] Llama sequence length T={} is out of range; expected 1 <= T <= "
                 "max_seq_len={}",
                 start + tokens.size(1), cfg_.max_seq_len);
  for (int64_t layer : hidden_layers) {
    FSDPP_CHECK_AS(ConfigError, layer >= 0 && layer < cfg_.n_layers,
                   "[models] Llama has no layer {} to return the output of; expected 0 <= layer "
                   "< n_layers={}",
                   layer, cfg_.n_layers);
  }
  // Document masking: the positions checked and the mask made once, for every block.
  at::Tensor positions, mask;
  if (positions_in.defined()) {
    positions = positions_in.to(tokens.device());
    detail::check_positions(positions, tokens.sizes(), cfg_.max_seq_len, "Llama", "max_seq_len");
    mask = detail::document_causal_mask(positions);
  }
  auto h = parallel ? parallel->embed(tokens, tok_embeddings->weight)
                    : tok_embeddings(tokens);  // (B,T,C)
  std::vector<at::Tensor> outputs(layers->size());
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& block = *layers->ptr<TransformerBlockImpl>(i);
    h = cache ? fsdpp::forward(block, h, cache->layers.at(i))
              : run_block(block, h, positions, mask);
    outputs[i] = h;
  }
  if (cache) cache->length += tokens.size(1);
  if (hidden) {
    for (int64_t layer : hidden_layers) hidden->push_back(outputs[layer]);
  }
  h = norm(h);
  if (parallel) h = parallel->enter(h, "output");
  if (output) return output(h);                       // (B,T,V)
  return at::linear(h, tok_embeddings->weight);       // tied: (B,T,C) x (V,C)^T
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens) { return hidden_to_logits(tokens); }

LlamaOutput LlamaImpl::forward(const at::Tensor& tokens, const at::Tensor& targets) {
  return forward(tokens, targets, {});
}

LlamaOutput LlamaImpl::forward(const at::Tensor& tokens, const at::Tensor& targets,
                               const std::vector<int64_t>& hidden_layers,
                               const at::Tensor& positions) {
  FSDPP_CHECK_AS(ConfigError, !targets.defined() || targets.sizes() == tokens.sizes(),
                 "[models] Llama targets have shape {}; expected the tokens' shape {}",
                 targets.sizes(), tokens.sizes());
  LlamaOutput out;
  out.logits = hidden_to_logits(tokens, hidden_layers, &out.hidden_states, nullptr, positions);
  if (!targets.defined()) return out;
  out.loss = parallel ? parallel->loss(out.logits, targets, 0)
                      : token_cross_entropy(out.logits, targets);
  return out;
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens, KVCache& cache) {
  FSDPP_CHECK(cache.layers.size() == layers->size(),
              "[models] a KV cache of {} layers for a Llama of {}; expected KVCache(n_layers)",
              cache.layers.size(), layers->size());
  return hidden_to_logits(tokens, {}, nullptr, &cache);
}

// ---- free functions ----

at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                               double divisor) {
  FSDPP_CHECK_AS(ConfigError, divisor >= 0 && std::isfinite(divisor),
                 "[models] token_cross_entropy: divisor={}; expected 0 (the mean) or > 0", divisor);
  auto flat = logits.reshape({-1, logits.size(-1)});
  flat = flat.to(compute_dtype(flat));
  namespace F = torch::nn::functional;
  auto o = F::CrossEntropyFuncOptions().ignore_index(-100);
  if (divisor == 0) return F::cross_entropy(flat, targets.reshape({-1}), o);
  // A sum (0 without loss tokens, where a mean would be 0/0) over the caller's count.
  return F::cross_entropy(flat, targets.reshape({-1}), o.reduction(torch::kSum)) / divisor;
}

bool is_non_persistent_buffer(std::string_view name) {
  return name.ends_with("rope_cos") || name.ends_with("rope_sin");
}

int64_t num_parameters(const torch::nn::Module& module) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

at::Tensor generate(Llama& model, const at::Tensor& prompt, int64_t n_new, double temperature,
                    int64_t top_k, std::optional<at::Generator> generator) {
  GenerateOptions o;
  o.max_new_tokens = n_new;
  o.temperature = temperature;
  o.top_k = top_k;
  o.generator = std::move(generator);
  return generate(model, prompt, o);
}

at::Tensor generate(Llama& model, const at::Tensor& prompt, const GenerateOptions& options) {
  const int64_t max_len = model->config().max_seq_len;
  auto on_device = prompt.to(model->tok_embeddings->weight.device(), at::kLong);
  if (!model->parallel) {
    auto cached = cached_last_logits(
        [&](const at::Tensor& tokens, KVCache& cache) { return fsdpp::forward(model, tokens, cache); },
        model->layers->size());
    return sample_tokens(cached, {max_len, model->config().vocab_size}, on_device, options);
  }
  auto last_logits = [&](const at::Tensor& tokens) {
    at::Tensor context = tokens;
    int64_t t = context.size(1);
    // Sequence parallelism needs a length its degree divides: padding on the right changes no
    // logit before it (causal attention), and the last real position is read; at max_seq_len
    // the oldest tokens are dropped instead.
    const int64_t multiple = model->parallel ? model->parallel->sequence_multiple() : 1;
    if (t % multiple != 0 && t + multiple - t % multiple <= max_len) {
      context = at::cat({context, at::zeros({context.size(0), multiple - t % multiple}, context.options())}, 1);
    } else if (t % multiple != 0) {
      context = context.narrow(1, t % multiple, t - t % multiple);
      t = context.size(1);
    }
    at::Tensor logits = fsdpp::forward(model, context);  // (B,t,V)
    auto last = logits.select(1, t - 1).to(at::kFloat);   // (B,V)
    // Under tensor parallelism each rank has its vocabulary columns; every rank samples the
    // same token from the whole (its generator in the same state).
    return model->parallel ? model->parallel->whole_logits(last) : last;
  };
  return sample_tokens(last_logits, {max_len, model->config().vocab_size}, on_device, options);
}

}  // namespace fsdpp::models
