// Qwen3-MoE, following transformers' modeling_qwen3_moe.py operation for operation so that its
// weights give the same logits. See include/fsdpp/models/qwen3_moe.h.
#include "fsdpp/models/qwen3_moe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "fsdpp/common/error.h"
#include "decoder_parts.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "meta_modules.h"

namespace fsdpp::models {
namespace {

void check_positive(std::string_view field, int64_t value) {
  detail::check_positive("Qwen3MoeConfig", field, value);
}

// transformers' rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the last dim.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

// cos and sin as Qwen3MoeRotaryEmbedding computes them: inverse frequencies and angles in float32
// (not double, unlike fsdpp's Llama), so that they round as transformers', then cast to the
// activations' dtype (as transformers does, once per forward).
std::pair<at::Tensor, at::Tensor> qwen3_moe_rope(const Qwen3MoeConfig& cfg, int64_t T,
                                                 const at::Tensor& like) {
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(like.device());
  auto exponent = at::arange(0, cfg.head_dim, 2, f32) / static_cast<double>(cfg.head_dim);
  auto inv_freq = 1.0 / at::pow(cfg.rope_theta, exponent);               // (D/2)
  auto freqs = at::arange(T, f32).unsqueeze(1) * inv_freq.unsqueeze(0);  // (T, D/2)
  auto emb = at::cat({freqs, freqs}, -1);                                // (T, D)
  return {emb.cos().to(like.scalar_type()), emb.sin().to(like.scalar_type())};
}

std::pair<at::Tensor, at::Tensor> qwen3_moe_rope(const Qwen3MoeConfig& cfg,
                                                 const at::Tensor& positions, int64_t max_position,
                                                 const at::Tensor& like) {
  // The table's rows at the positions: each row is the one a document alone computes.
  auto [cos, sin] = qwen3_moe_rope(cfg, max_position + 1, like);
  return {detail::rows_at(cos, positions), detail::rows_at(sin, positions)};  // (B,T,D)
}

Qwen3MoeDocumentMask qwen3_moe_document_mask(const Qwen3MoeConfig& cfg, const at::Tensor& positions,
                                         at::IntArrayRef tokens, const at::Tensor& like) {
  Qwen3MoeDocumentMask out;
  const auto on_device = positions.to(like.device());
  const int64_t top = detail::check_positions(on_device, tokens, cfg.max_position_embeddings,
                                              "Qwen3Moe", "max_position_embeddings");
  std::tie(out.cos, out.sin) = qwen3_moe_rope(cfg, on_device, top, like);
  out.mask = detail::document_causal_mask(on_device);
  return out;
}

// ---- config ----

void Qwen3MoeConfig::validate() const {
  check_positive("vocab_size", vocab_size);
  check_positive("hidden_size", hidden_size);
  check_positive("intermediate_size", intermediate_size);
  check_positive("num_hidden_layers", num_hidden_layers);
  check_positive("num_attention_heads", num_attention_heads);
  check_positive("num_key_value_heads", num_key_value_heads);
  check_positive("head_dim", head_dim);
  check_positive("max_position_embeddings", max_position_embeddings);
  check_positive("decoder_sparse_step", decoder_sparse_step);
  FSDPP_CHECK_AS(ConfigError, num_experts >= 0,
                 "[models] Qwen3MoeConfig.num_experts={} is negative; expected >= 0 (0: every "
                 "layer dense)", num_experts);
  if (num_experts > 0) {
    check_positive("moe_intermediate_size", moe_intermediate_size);
    FSDPP_CHECK_AS(ConfigError, num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts,
                   "[models] Qwen3MoeConfig.num_experts_per_tok={} is out of range; expected 1 "
                   "<= num_experts_per_tok <= num_experts={}",
                   num_experts_per_tok, num_experts);
  }
  FSDPP_CHECK_AS(ConfigError, num_attention_heads % num_key_value_heads == 0,
                 "[models] Qwen3MoeConfig.num_key_value_heads={} does not divide "
                 "num_attention_heads={}; expected num_attention_heads % num_key_value_heads == 0",
                 num_key_value_heads, num_attention_heads);
  FSDPP_CHECK_AS(ConfigError, head_dim % 2 == 0,
                 "[models] Qwen3MoeConfig.head_dim={} is odd; rotary embedding needs an even "
                 "head_dim", head_dim);
  for (int64_t layer : mlp_only_layers) {
    FSDPP_CHECK_AS(ConfigError, layer >= 0 && layer < num_hidden_layers,
                   "[models] Qwen3MoeConfig.mlp_only_layers holds {}, which is not a layer; "
                   "expected 0 <= layer < num_hidden_layers={}", layer, num_hidden_layers);
  }
  detail::check_positive_number("Qwen3MoeConfig", "rms_norm_eps", rms_norm_eps);
  detail::check_positive_number("Qwen3MoeConfig", "rope_theta", rope_theta);
  FSDPP_CHECK_AS(ConfigError, router_aux_loss_coef >= 0 && std::isfinite(router_aux_loss_coef),
                 "[models] Qwen3MoeConfig.router_aux_loss_coef={} is not a number >= 0",
                 router_aux_loss_coef);
  FSDPP_CHECK_AS(ConfigError, initializer_range >= 0 && std::isfinite(initializer_range),
                 "[models] Qwen3MoeConfig.initializer_range={} is not a number >= 0",
                 initializer_range);
}

// Qwen3MoeDecoderLayer.__init__'s rule.
bool Qwen3MoeConfig::is_sparse_layer(int64_t layer) const {
  const bool mlp_only =
      std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return !mlp_only && num_experts > 0 && (layer + 1) % decoder_sparse_step == 0;
}

// ---- attention ----

Qwen3MoeAttentionImpl::Qwen3MoeAttentionImpl(const Qwen3MoeConfig& cfg, at::Device device)
    : DecoderAttentionImpl({.dim = cfg.hidden_size,
                            .n_heads = cfg.num_attention_heads,
                            .n_kv_heads = cfg.num_key_value_heads,
                            .head_dim = cfg.head_dim,
                            .qk_norm_eps = cfg.rms_norm_eps},
                           device) {}

namespace {

// transformers' apply_rotary_pos_emb of q or k (B, T, heads, head_dim) by cos, sin (T, head_dim),
// or each token's own rows (B, T, head_dim) under document masking.
DecoderAttentionImpl::Rotate rotate_half_by(const at::Tensor& cos, const at::Tensor& sin) {
  return [&cos, &sin](const at::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(3);
    const int64_t rows = cos.dim() == 3 ? B : 1;
    auto c = cos.view({rows, T, 1, D}).to(x.scalar_type());
    auto s = sin.view({rows, T, 1, D}).to(x.scalar_type());
    return x * c + rotate_half(x) * s;
  };
}

}  // namespace

at::Tensor Qwen3MoeAttentionImpl::forward(const at::Tensor& input, const at::Tensor& cos,
                                          const at::Tensor& sin) {
  return forward(input, cos, sin, at::Tensor());
}

at::Tensor Qwen3MoeAttentionImpl::forward(const at::Tensor& input, const at::Tensor& cos,
                                          const at::Tensor& sin, const at::Tensor& mask) {
  return attend(input, rotate_half_by(cos, sin), mask);
}

at::Tensor Qwen3MoeAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                          const at::Tensor& sin, KVCache::Layer& cache) {
  return attend_cached(x, rotate_half_by(cos, sin), cache);
}

// ---- dense MLP ----

Qwen3MoeMLPImpl::Qwen3MoeMLPImpl(int64_t hidden, int64_t intermediate, at::Device device)
    : SwiGLUImpl({.dim = hidden, .hidden = intermediate}, device) {}

// ---- experts ----

Qwen3MoeExpertsImpl::Qwen3MoeExpertsImpl(int64_t num_experts, int64_t hidden, int64_t intermediate,
                                         at::Device device)
    : num_experts(num_experts) {
  const auto o = at::TensorOptions().device(device.is_meta() ? device : at::kCPU);
  gate_proj = register_parameter("gate_proj", at::zeros({num_experts, intermediate, hidden}, o));
  up_proj = register_parameter("up_proj", at::zeros({num_experts, intermediate, hidden}, o));
  down_proj = register_parameter("down_proj", at::zeros({num_experts, hidden, intermediate}, o));
}

at::Tensor Qwen3MoeExpertsImpl::forward(const at::Tensor& x, const at::Tensor& expert_ids,
                                        const at::Tensor& weights) {
  const int64_t k = expert_ids.size(1);
  // Pair p = n*k + j is token n's j-th choice. A stable sort by expert keeps each expert's
  // tokens in token order, the order transformers' loop adds them in.
  const auto flat_ids = expert_ids.reshape({-1});
  const auto order = at::argsort(flat_ids, /*stable=*/true);
  const auto token_of = at::floor_divide(order, k);
  const auto weight_of = weights.reshape({-1}).index_select(0, order);
  // The only host sync: how many pairs each expert has, to slice the sorted pairs.
  const auto counts = at::bincount(flat_ids, /*weights=*/{}, num_experts).to(at::kCPU);
  const auto* count = counts.data_ptr<int64_t>();
  auto out = at::zeros_like(x);
  if (x.size(0) > 0 && runs_grouped(x)) {
    // Every pair's row, grouped by expert, through three grouped GEMMs; then added back in the
    // pairs' order, as the loop below adds them.
    const std::vector<int64_t> per_expert(count, count + num_experts);
    auto y = grouped(x.index_select(0, token_of), per_expert) * weight_of.unsqueeze(1);
    out.index_add_(0, token_of, y.to(out.scalar_type()));
    return out;
  }
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    auto tokens = token_of.narrow(0, start, n);
    auto xe = x.index_select(0, tokens);  // (n, D)
    auto y = expert(e, xe) * weight_of.narrow(0, start, n).unsqueeze(1);
    out.index_add_(0, tokens, y.to(out.scalar_type()));  // in place: no copy of out per expert
    start += n;
  }
  return out;
}

namespace {

// oneDNN, which LibTorch's reduced-precision CPU matmuls run on, compiles and caches a kernel per
// shape (up to 1024 in its primitive cache and as many in ideep's), and an expert's row count
// changes with every batch's routing: on a CPU with native bf16 (AVX-512 BF16) a bf16 MoE grew by
// ~400 MiB over 100 steps until the caches were full. Padding the rows with zeros to one of 8
// sizes per power of two (16 at least) bounds the shapes to a few dozen and the extra rows to
// 1/8. Zero rows add exact zeros to the weights' gradients; float32 (MKL) and GPUs keep n rows.
int64_t padded_rows(const at::Tensor& xe) {
  const int64_t n = xe.size(0);
  if (!xe.is_cpu() || !at::isReducedFloatingType(xe.scalar_type()) || n <= 16) return n;
  int64_t step = 1;
  while (step * 16 <= n) step *= 2;  // step = 2^(floor(log2 n) - 3)
  return (n + step - 1) / step * step;
}

}  // namespace

at::Tensor Qwen3MoeExpertsImpl::expert(int64_t e, const at::Tensor& xe) {
  const int64_t n = xe.size(0), rows = padded_rows(xe);
  const auto x = rows == n ? xe : at::constant_pad_nd(xe, {0, 0, 0, rows - n});
  auto h = at::silu(at::linear(x, gate_proj[e])) * at::linear(x, up_proj[e]);  // (rows, I)
  auto y = at::linear(h, down_proj[e]);                                       // (rows, D)
  return rows == n ? y : y.narrow(0, 0, n);
}

bool Qwen3MoeExpertsImpl::runs_grouped(const at::Tensor& x) const {
  if (kernel != ExpertKernel::AUTO) return kernel == ExpertKernel::GROUPED;
  return x.is_cuda() && x.scalar_type() == at::kBFloat16;
}

at::Tensor Qwen3MoeExpertsImpl::grouped(const at::Tensor& x, const std::vector<int64_t>& counts) {
  FSDPP_CHECK_AS(ConfigError, static_cast<int64_t>(counts.size()) == num_experts && x.size(0) > 0,
                 "[models] Qwen3MoeExperts: grouped GEMMs over {} rows with {} counts for {} experts; "
                 "expected one count per expert and at least one row", x.size(0), counts.size(), num_experts);
  // The end of each expert's rows, int32 on x's device (what _grouped_mm reads).
  std::vector<int32_t> ends(counts.size());
  int64_t end = 0;
  for (size_t e = 0; e < counts.size(); ++e) ends[e] = static_cast<int32_t>(end += counts[e]);
  const auto offsets = at::tensor(ends, at::TensorOptions().dtype(at::kInt)).to(x.device());
  // (M,D) x (E,D,I) -> (M,I) per group: the stacked (E,I,D) weights transposed, not copied.
  const auto gate = at::_grouped_mm(x, gate_proj.transpose(1, 2), offsets);
  const auto up = at::_grouped_mm(x, up_proj.transpose(1, 2), offsets);
  return at::_grouped_mm(at::silu(gate) * up, down_proj.transpose(1, 2), offsets);
}

at::Tensor Qwen3MoeExpertsImpl::forward(const at::Tensor& x,
                                        const std::vector<int64_t>& tokens_per_expert) {
  FSDPP_CHECK_AS(ConfigError, static_cast<int64_t>(tokens_per_expert.size()) == num_experts,
                 "[models] Qwen3MoeExperts: {} counts for {} experts; expected one per expert",
                 tokens_per_expert.size(), num_experts);
  if (x.size(0) > 0 && runs_grouped(x)) {
    FSDPP_CHECK_AS(ConfigError,
                   std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), int64_t{0}) == x.size(0),
                   "[models] Qwen3MoeExperts: the counts do not add up to x's {} rows", x.size(0));
    return grouped(x, tokens_per_expert);
  }
  std::vector<at::Tensor> outs;
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t n = tokens_per_expert[e];
    if (n == 0) continue;
    outs.push_back(expert(e, x.narrow(0, start, n)));
    start += n;
  }
  FSDPP_CHECK_AS(ConfigError, start == x.size(0),
                 "[models] Qwen3MoeExperts: the counts add up to {} rows but x has {}", start,
                 x.size(0));
  // No rows: an optimizer must still see a gradient (of zeros) for these experts, as it does
  // for the experts of one process that received no token, or it would skip their update.
  if (outs.empty()) return expert(0, x);
  return outs.size() == 1 ? outs.front() : at::cat(outs);
}

// ---- router ----

Qwen3MoeRouterImpl::Qwen3MoeRouterImpl(int64_t num_experts, int64_t hidden, at::Device device) {
  weight = register_parameter(
      "weight", at::zeros({num_experts, hidden}, at::TensorOptions().device(device.is_meta() ? device : at::kCPU)));
}

at::Tensor Qwen3MoeRouterImpl::forward(const at::Tensor& x) { return at::linear(x, weight); }

Qwen3MoeRouting route_top_k(const at::Tensor& logits, int64_t top_k, bool norm_topk_prob) {
  auto probs = at::softmax(logits, -1, at::kFloat);
  auto [top, ids] = at::topk(probs, top_k, -1);
  if (norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  return {logits, ids, top.to(logits.scalar_type())};
}

// ---- sparse block ----

Qwen3MoeSparseMoeBlockImpl::Qwen3MoeSparseMoeBlockImpl(const Qwen3MoeConfig& cfg, at::Device device)
    : top_k(cfg.num_experts_per_tok), norm_topk_prob(cfg.norm_topk_prob) {
  // Registered in transformers' order (experts, then gate), so parameter lists line up.
  experts = register_module(
      "experts", Qwen3MoeExperts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, device));
  gate = register_module("gate", Qwen3MoeRouter(cfg.num_experts, cfg.hidden_size, device));
}

Qwen3MoeLayerOutput Qwen3MoeSparseMoeBlockImpl::forward(const at::Tensor& x) {
  if (parallel) return parallel->sparse_block(*this, x);
  const auto flat = x.reshape({-1, x.size(-1)});  // (N, D)
  auto routing = route(flat, gate->weight);
  // Through fsdpp::forward, so that the experts may be an FSDP unit of their own.
  auto y = fsdpp::forward(experts, flat, routing.expert_ids, routing.weights);
  return {y.view(x.sizes()), routing.logits};
}

Qwen3MoeRouting Qwen3MoeSparseMoeBlockImpl::route(const at::Tensor& x,
                                                  const at::Tensor& gate_weight) const {
  return route_top_k(at::linear(x, gate_weight), top_k, norm_topk_prob);
}

// ---- decoder layer ----

Qwen3MoeDecoderLayerImpl::Qwen3MoeDecoderLayerImpl(const Qwen3MoeConfig& cfg, int64_t layer,
                                                   at::Device device) {
  self_attn = register_module("self_attn", Qwen3MoeAttention(cfg, device));
  if (cfg.is_sparse_layer(layer)) {
    moe = register_module("mlp", Qwen3MoeSparseMoeBlock(cfg, device));
  } else {
    dense = register_module("mlp", Qwen3MoeMLP(cfg.hidden_size, cfg.intermediate_size, device));
  }
  input_layernorm =
      register_module("input_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device));
}

namespace {

// A layer's second residual branch: h + mlp(post_attention_layernorm(h)), sparse or dense.
Qwen3MoeLayerOutput add_mlp(Qwen3MoeDecoderLayerImpl& layer, const at::Tensor& h) {
  auto normed = layer.post_attention_layernorm(h);
  if (layer.moe) {
    auto out = fsdpp::forward(layer.moe, normed);
    return {h + out.hidden, out.router_logits};
  }
  return {h + fsdpp::forward(layer.dense, normed), at::Tensor()};
}

}  // namespace

// The sub-modules go through fsdpp::forward so that a size-based policy may make them units.
Qwen3MoeLayerOutput Qwen3MoeDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                                      const at::Tensor& sin) {
  return forward(x, cos, sin, at::Tensor());
}

Qwen3MoeLayerOutput Qwen3MoeDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                                      const at::Tensor& sin,
                                                      const at::Tensor& mask) {
  const auto normed_x = input_layernorm(x);
  auto h = x + (mask.defined() ? fsdpp::forward(self_attn, normed_x, cos, sin, mask)
                               : fsdpp::forward(self_attn, normed_x, cos, sin));
  return add_mlp(*this, h);
}

Qwen3MoeLayerOutput Qwen3MoeDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                                      const at::Tensor& sin,
                                                      KVCache::Layer& cache) {
  auto h = x + fsdpp::forward(self_attn, input_layernorm(x), cos, sin, cache);
  return add_mlp(*this, h);
}

// ---- the model ----

Qwen3MoeImpl::Qwen3MoeImpl(const Qwen3MoeConfig& cfg, at::Device device) : cfg_(cfg) {
  cfg_.validate();
  detail::GlobalRngRestorer restore_global_rng;
  embed_tokens = register_module("embed_tokens",
                                 detail::make_embedding(cfg.vocab_size, cfg.hidden_size, device));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    layers->push_back(Qwen3MoeDecoderLayer(cfg_, i, device));
  }
  norm = register_module("norm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device));
  if (!cfg.tie_word_embeddings) {
    lm_head = register_module("lm_head", detail::make_linear(cfg.hidden_size, cfg.vocab_size, device));
  }
  // transformers' _init_weights: normal(0, initializer_range) for every matrix (embeddings,
  // projections, router, experts), ones for the norms, in parameter order.
  plan_.seed = cfg_.seed;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    ParamInit p{.name = item.key(), .shape = item.value().sizes().vec(), .std = cfg_.initializer_range};
    if (item.key().ends_with("norm.weight")) {
      p.kind = ParamInit::Kind::FILL;
      p.value = 1.0;
    }
    plan_.params.push_back(std::move(p));
  }
  if (device.is_meta()) return;
  init_weights();
  detail::place_on(*this, device);
}

void Qwen3MoeImpl::init_weights() { detail::draw_weights(*this, plan_); }

at::Tensor Qwen3MoeImpl::forward(const at::Tensor& tokens) {
  return forward(tokens, at::Tensor(), /*output_router_logits=*/false).logits;
}

Qwen3MoeOutput Qwen3MoeImpl::forward(const at::Tensor& tokens, const at::Tensor& targets,
                                     bool output_router_logits,
                                     const std::vector<int64_t>& hidden_layers,
                                     const at::Tensor& positions) {
  FSDPP_CHECK_AS(ConfigError, tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                 "[models] Qwen3Moe tokens must be (B,T) int64; got {} dims of {}", tokens.dim(),
                 c10::toString(tokens.scalar_type()));
  const int64_t T = tokens.size(1);
  FSDPP_CHECK_AS(ConfigError, T >= 1 && T <= cfg_.max_position_embeddings,
                 "[models] Qwen3Moe sequence length T={} is out of range; expected 1 <= T <= "
                 "max_position_embeddings={}", T, cfg_.max_position_embeddings);
  FSDPP_CHECK_AS(ConfigError, !targets.defined() || targets.sizes() == tokens.sizes(),
                 "[models] Qwen3Moe targets have shape {}; expected the tokens' shape {}",
                 targets.sizes(), tokens.sizes());
  for (int64_t layer : hidden_layers) {
    FSDPP_CHECK_AS(ConfigError, layer >= 0 && layer < cfg_.num_hidden_layers,
                   "[models] Qwen3Moe has no layer {} to return the output of; expected 0 <= "
                   "layer < num_hidden_layers={}",
                   layer, cfg_.num_hidden_layers);
  }
  auto h = tensor_parallel ? tensor_parallel->embed(tokens, embed_tokens->weight)
                           : embed_tokens(tokens);  // (B,T,D), or this rank's sequence chunk
  // Made once per forward, as transformers does, in the activations' dtype: the tables of
  // positions 0 .. T-1, or with document masking each token's rows and the mask.
  at::Tensor cos, sin, mask;
  if (positions.defined()) {
    auto d = qwen3_moe_document_mask(cfg_, positions, tokens.sizes(), h);
    cos = d.cos, sin = d.sin, mask = d.mask;
  } else {
    std::tie(cos, sin) = qwen3_moe_rope(cfg_, T, h);
  }
  Qwen3MoeOutput out;
  std::vector<at::Tensor> outputs(layers->size());
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& layer = *layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    auto o = mask.defined() ? fsdpp::forward(layer, h, cos, sin, mask)
                            : fsdpp::forward(layer, h, cos, sin);
    h = outputs[i] = o.hidden;
    if (output_router_logits && o.router_logits.defined()) {
      out.router_logits.push_back(o.router_logits);
    }
  }
  for (int64_t layer : hidden_layers) out.hidden_states.push_back(outputs[layer]);
  h = norm(h);
  if (tensor_parallel) h = tensor_parallel->enter(h, "lm_head");
  out.logits = lm_head ? lm_head(h) : at::linear(h, embed_tokens->weight);
  if (output_router_logits) {
    auto stats = router_statistics(out.router_logits, cfg_.num_experts, cfg_.num_experts_per_tok);
    if (parallel) stats = parallel->global_statistics(stats);
    out.aux_loss = load_balancing_loss(stats, cfg_.num_experts);
  }
  if (targets.defined()) {
    out.loss = tensor_parallel ? tensor_parallel->loss(out.logits, targets, 0)
                               : token_cross_entropy(out.logits, targets);
    if (output_router_logits) {
      out.loss = out.loss + cfg_.router_aux_loss_coef * out.aux_loss.to(out.loss.scalar_type());
    }
  }
  return out;
}

at::Tensor Qwen3MoeImpl::forward(const at::Tensor& tokens, KVCache& cache) {
  FSDPP_CHECK(cache.layers.size() == layers->size(),
              "[models] a KV cache of {} layers for a Qwen3Moe of {}; expected KVCache(layers)",
              cache.layers.size(), layers->size());
  FSDPP_CHECK(!tensor_parallel, "[models] Qwen3Moe with a KV cache under tensor parallelism is "
                                "not supported; sample without the cache");
  const int64_t start = cache.length, T = tokens.size(1);
  FSDPP_CHECK_AS(ConfigError, T >= 1 && start + T <= cfg_.max_position_embeddings,
                 "[models] Qwen3Moe sequence length T={} is out of range; expected 1 <= T <= "
                 "max_position_embeddings={}", start + T, cfg_.max_position_embeddings);
  auto h = embed_tokens(tokens);
  // The tables of positions 0 .. start + T - 1, as one forward over the whole context makes
  // them (each position's angles are its own products), then the new positions' rows.
  auto [cos, sin] = qwen3_moe_rope(cfg_, start + T, h);
  cos = cos.narrow(0, start, T);
  sin = sin.narrow(0, start, T);
  for (size_t i = 0; i < layers->size(); ++i) {
    h = fsdpp::forward(*layers->ptr<Qwen3MoeDecoderLayerImpl>(i), h, cos, sin, cache.layers[i])
            .hidden;
  }
  cache.length += T;
  h = norm(h);
  return lm_head ? lm_head(h) : at::linear(h, embed_tokens->weight);
}

// ---- load balancing ----

at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts,
                               int64_t top_k) {
  if (router_logits.empty()) return at::zeros({}, at::kFloat);  // no sparse layer: no loss
  return load_balancing_loss(router_statistics(router_logits, num_experts, top_k), num_experts);
}

at::Tensor router_statistics(const std::vector<at::Tensor>& router_logits, int64_t num_experts,
                             int64_t top_k) {
  const auto device = router_logits.empty() ? at::Device(at::kCPU) : router_logits.front().device();
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  auto counts = at::zeros({num_experts}, f32);
  auto prob_sums = at::zeros({num_experts}, f32);
  int64_t rows = 0;
  for (const auto& logits : router_logits) {
    // transformers takes the softmax in the logits' own dtype here (unlike the router's).
    auto probs = at::softmax(logits.to(device), -1);
    auto selected = std::get<1>(at::topk(probs, top_k, -1));
    // Counting needs no gradient; the probabilities carry it (Switch Transformer's f_e * P_e).
    counts = counts + at::bincount(selected.reshape({-1}), {}, num_experts).to(at::kFloat);
    prob_sums = prob_sums + probs.to(at::kFloat).sum(0);
    rows += probs.size(0);
  }
  return at::cat({counts, prob_sums, at::full({1}, static_cast<double>(rows), f32)});
}

at::Tensor load_balancing_loss(const at::Tensor& statistics, int64_t num_experts) {
  const auto rows = statistics.narrow(0, 2 * num_experts, 1).detach().clamp_min(1);
  auto tokens_per_expert = statistics.narrow(0, 0, num_experts).detach() / rows;
  auto prob_per_expert = statistics.narrow(0, num_experts, num_experts) / rows;
  return (tokens_per_expert * prob_per_expert).sum() * static_cast<double>(num_experts);
}

}  // namespace fsdpp::models
