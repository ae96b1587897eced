#pragma once
// A Qwen3-MoE decoder, as Hugging Face transformers' Qwen3MoeForCausalLM computes it: pre-norm
// blocks of Qwen3 attention (RMSNorm on each q and k head, rotate-half RoPE, grouped-query heads,
// head_dim from the config, no biases) and sparse Mixture-of-Experts MLPs (a bias-free router,
// softmax in float32, top-k token choice, SwiGLU experts), with dense SwiGLU MLPs on the layers
// `mlp_only_layers` and `decoder_sparse_step` leave dense.
//
//   fsdpp::models::Qwen3MoeConfig cfg{.vocab_size = 256, .hidden_size = 64, ...};
//   fsdpp::models::Qwen3Moe model(cfg);
//   fsdpp::apply_fully_shard(*model, fsdpp::transformer_layer_policy({"Qwen3MoeDecoderLayer"}), o);
//   auto out = fsdpp::forward(model, tokens, targets, /*output_router_logits=*/true);
//   // out.logits (B,T,V), out.loss = cross entropy + router_aux_loss_coef * out.aux_loss
//
// Parameter names are Hugging Face's without the leading "model." (embed_tokens.weight,
// layers.0.self_attn.q_proj.weight, layers.0.mlp.gate.weight, norm.weight, lm_head.weight); the
// experts of a sparse layer are three stacked tensors, layers.i.mlp.experts.{gate,up,down}_proj
// of shapes (E, I, D), (E, I, D), (E, D, I), whose slice e is the published checkpoints'
// model.layers.i.mlp.experts.e.{gate,up,down}_proj.weight (fsdpp/models/hf_qwen3_moe.h converts).
// Since the RoPE is transformers' own, no rows are permuted (unlike fsdpp's Llama).

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "fsdpp/models/decoder_attention.h"
#include "fsdpp/models/kv_cache.h"
#include "fsdpp/models/llama.h"  // token_cross_entropy, num_parameters
#include "fsdpp/models/rms_norm.h"
#include "fsdpp/models/swiglu.h"

namespace fsdpp::models {

// Field names are Hugging Face's config.json keys (Qwen3MoeConfig).
struct Qwen3MoeConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;      // the dense MLP's hidden size (mlp_only_layers, ...)
  int64_t moe_intermediate_size = 32;   // each expert's hidden size
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t head_dim = 16;                // independent of hidden_size / num_attention_heads
  int64_t num_experts = 8;              // config.json may also call it num_local_experts
  int64_t num_experts_per_tok = 2;      // top-k
  bool norm_topk_prob = false;          // renormalise the k chosen probabilities to sum to 1
  int64_t decoder_sparse_step = 1;      // layer i is sparse when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers; // ... and i is not listed here
  double router_aux_loss_coef = 0.001;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  uint64_t seed = 0;  // fsdpp's own: weights depend on this alone

  // Throws ConfigError ("[models] Qwen3MoeConfig.<field>=<value> ...; expected ...").
  void validate() const;
  bool is_sparse_layer(int64_t layer) const;
};

// Qwen3 attention: q/k/v projections, RMSNorm over each head's head_dim on q and k, RoPE, causal
// grouped-query attention scaled by head_dim^-0.5, output projection: the decoders' attention
// (decoder_attention.h) with its per-head norms and transformers' rotate-half RoPE. Under tensor
// parallelism (fsdpp/models/qwen3_moe_tp_plan.h) `parallel` holds the Llama's hooks, the same
// communication.
class Qwen3MoeAttentionImpl : public DecoderAttentionImpl {
 public:
  explicit Qwen3MoeAttentionImpl(const Qwen3MoeConfig& cfg, at::Device device = at::kCPU);
  // x (B,T,D); cos, sin (T, head_dim) in rotate-half layout -> (B,T,D)
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // Document masking: cos, sin (B,T,head_dim) at each token's position and the mask (B,1,T,T)
  // bool of qwen3_moe_document_mask (undefined mask: causal over the row).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& mask);
  // The same for tokens after the cached ones (cos, sin of their positions), attending to them
  // too; x's keys and values are appended to the cache (kv_cache.h).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     KVCache::Layer& cache);
};
TORCH_MODULE(Qwen3MoeAttention);

// The dense SwiGLU MLP: down_proj(silu(gate_proj x) * up_proj x), the decoders' MLP (swiglu.h);
// `parallel` as Qwen3MoeAttentionImpl's.
class Qwen3MoeMLPImpl : public SwiGLUImpl {
 public:
  Qwen3MoeMLPImpl(int64_t hidden, int64_t intermediate, at::Device device = at::kCPU);
};
TORCH_MODULE(Qwen3MoeMLP);

// How the experts' matmuls run: LOOP, one gate/up/down chain per expert with tokens (the CPU's
// exact path); GROUPED, each projection one grouped GEMM over every expert's rows at once
// (at::_grouped_mm with the experts' row offsets, as torchtitan runs them); AUTO, GROUPED on a
// CUDA device in bfloat16, LOOP elsewhere. Both give each row its own expert's SwiGLU.
enum class ExpertKernel { AUTO, LOOP, GROUPED };

// E SwiGLU experts stored stacked, so that one matmul serves every token routed to an expert.
// Under expert parallelism (fsdpp/models/qwen3_moe_ep.h) the module holds this rank's experts
// only: E/ep of them, num_experts says how many.
class Qwen3MoeExpertsImpl : public torch::nn::Module {
 public:
  Qwen3MoeExpertsImpl(int64_t num_experts, int64_t hidden, int64_t intermediate,
                      at::Device device = at::kCPU);
  // x (N,D); top-k expert ids (N,k) int64 and weights (N,k) -> sum_j w[n,j] * expert_j(x[n]),
  // (N,D). The (token, choice) pairs are sorted by expert; each expert with tokens gathers them
  // (index_select), runs one SwiGLU over all of them and adds them back weighted (index_add).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& expert_ids,
                     const at::Tensor& weights);
  // Rows already grouped by expert (what expert-parallel dispatch delivers): the first
  // tokens_per_expert[0] rows go to expert 0, the next to expert 1, ... -> each row's expert
  // output, unweighted, (M,D). With no rows at all, expert 0 still runs over the empty input so
  // that every weight gets a (zero) gradient, as experts without tokens get in one process.
  at::Tensor forward(const at::Tensor& x, const std::vector<int64_t>& tokens_per_expert);
  // Expert e's SwiGLU over its rows xe (n,D) -> (n,D).
  at::Tensor expert(int64_t e, const at::Tensor& xe);
  // Every expert's SwiGLU over rows grouped by expert, counts[e] rows for expert e (at least one
  // row in all), as three grouped GEMMs -> (M,D).
  at::Tensor grouped(const at::Tensor& x, const std::vector<int64_t>& counts);
  // Whether `kernel` runs GROUPED for rows like x.
  bool runs_grouped(const at::Tensor& x) const;

  ExpertKernel kernel = ExpertKernel::AUTO;

  at::Tensor gate_proj, up_proj;  // (E, I, D)
  at::Tensor down_proj;           // (E, D, I)
  int64_t num_experts;
};
TORCH_MODULE(Qwen3MoeExperts);

// The router: logits = x W^T (no bias), probabilities by softmax in float32.
class Qwen3MoeRouterImpl : public torch::nn::Module {
 public:
  Qwen3MoeRouterImpl(int64_t num_experts, int64_t hidden, at::Device device = at::kCPU);
  at::Tensor forward(const at::Tensor& x);  // (N,D) -> logits (N,E)
  at::Tensor weight;                        // (E, D)
};
TORCH_MODULE(Qwen3MoeRouter);

struct Qwen3MoeRouting {
  at::Tensor logits;      // (N,E) in x's dtype, as transformers records them
  at::Tensor expert_ids;  // (N,k) int64, most probable first
  at::Tensor weights;     // (N,k) in x's dtype: the top-k probabilities, renormalised if asked
};
// softmax(logits) in float32, top-k, optional renormalisation: Qwen3MoeTopKRouter's arithmetic.
Qwen3MoeRouting route_top_k(const at::Tensor& logits, int64_t top_k, bool norm_topk_prob);

// What a decoder layer (and a sparse block) returns.
struct Qwen3MoeLayerOutput {
  at::Tensor hidden;         // (B,T,D)
  at::Tensor router_logits;  // (B*T,E) on sparse layers; undefined on dense ones
};
template <class F>
void fsdpp_visit_tensors(Qwen3MoeLayerOutput& o, F&& f) {
  f(o.hidden);
  if (o.router_logits.defined()) f(o.router_logits);
}

class Qwen3MoeSparseMoeBlockImpl;

// Where expert parallelism, and tensor parallelism inside a sparse block, communicate;
// fsdpp::models::parallelize_qwen3_moe_experts (fsdpp/models/qwen3_moe_ep.h) and the tensor-
// parallel plan (fsdpp/models/qwen3_moe_tp_plan.h) install one. Null, the default, routes and
// runs every expert here. Abstract so that the model knows nothing of process groups.
class Qwen3MoeParallelHooks {
 public:
  virtual ~Qwen3MoeParallelHooks() = default;
  // A sparse block's forward of x (B,T,D) as the layer holds it (this rank's sequence chunk
  // under sequence parallelism) -> the block's output alike and the router logits of the tokens
  // this rank routed.
  virtual Qwen3MoeLayerOutput sparse_block(Qwen3MoeSparseMoeBlockImpl& block,
                                           const at::Tensor& x) = 0;
  // The load-balancing statistics (router_statistics) of the tokens this rank routed -> those of
  // the global batch, with their gradient.
  virtual at::Tensor global_statistics(const at::Tensor& local) = 0;
};

// A sparse MoE block: route, then the experts.
class Qwen3MoeSparseMoeBlockImpl : public torch::nn::Module {
 public:
  explicit Qwen3MoeSparseMoeBlockImpl(const Qwen3MoeConfig& cfg, at::Device device = at::kCPU);
  // x (B,T,D) -> {hidden (B,T,D), router_logits (B*T,E)}; a struct rather than an
  // out-parameter so that, when the block is an FSDP unit of its own, fsdpp::forward hooks the
  // router logits' backward too (the load-balancing loss reaches the router through them).
  Qwen3MoeLayerOutput forward(const at::Tensor& x);
  // The routing of tokens x (N,D) by a router weight (the gate's, or what parallelism made of it).
  Qwen3MoeRouting route(const at::Tensor& x, const at::Tensor& gate_weight) const;

  Qwen3MoeRouter gate{nullptr};
  Qwen3MoeExperts experts{nullptr};
  int64_t top_k;
  bool norm_topk_prob;
  std::shared_ptr<Qwen3MoeParallelHooks> parallel;  // expert parallelism; null: none
};
TORCH_MODULE(Qwen3MoeSparseMoeBlock);

// Pre-norm residual block. Named Qwen3MoeDecoderLayer (as transformers' class), so that
// transformer_layer_policy({"Qwen3MoeDecoderLayer"}) makes every layer an FSDP unit.
class Qwen3MoeDecoderLayerImpl : public torch::nn::Module {
 public:
  Qwen3MoeDecoderLayerImpl(const Qwen3MoeConfig& cfg, int64_t layer, at::Device device = at::kCPU);
  Qwen3MoeLayerOutput forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // Document masking: attention's forward(x, cos, sin, mask).
  Qwen3MoeLayerOutput forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& mask);
  // Attention over a KV cache (sampling).
  Qwen3MoeLayerOutput forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              KVCache::Layer& cache);

  RMSNorm input_layernorm{nullptr};
  Qwen3MoeAttention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  // Exactly one of these is set, registered under transformers' name "mlp".
  Qwen3MoeSparseMoeBlock moe{nullptr};
  Qwen3MoeMLP dense{nullptr};
};
TORCH_MODULE(Qwen3MoeDecoderLayer);

struct Qwen3MoeOutput {
  at::Tensor logits;    // (B,T,V)
  at::Tensor loss;      // () with targets: mean cross entropy (+ coef * aux_loss when asked)
  at::Tensor aux_loss;  // () load-balancing loss, unscaled, when output_router_logits
  std::vector<at::Tensor> router_logits;  // one (B*T,E) per sparse layer, when asked
  std::vector<at::Tensor> hidden_states;  // (B,T,D) outputs of the layers asked for, in order
};
template <class F>
void fsdpp_visit_tensors(Qwen3MoeOutput& o, F&& f) {
  f(o.logits);
  if (o.loss.defined()) f(o.loss);
  if (o.aux_loss.defined()) f(o.aux_loss);
  for (auto& t : o.router_logits) f(t);
  for (auto& t : o.hidden_states) f(t);
}

class Qwen3MoeImpl : public torch::nn::Module {
 public:
  // Validates cfg; then the parameters on `device` with init_weights()' values, or on the meta
  // device without storage and undrawn (fsdpp/fsdp/deferred_init.h; as Llama's).
  explicit Qwen3MoeImpl(const Qwen3MoeConfig& cfg, at::Device device = at::kCPU);

  at::Tensor forward(const at::Tensor& tokens);  // (B,T) int64 -> logits (B,T,V)
  // targets (B,T) int64 aligned with tokens (the next tokens; -100 ignored), or undefined for no
  // loss. Unlike transformers' labels, targets are not shifted here (as fsdpp's Llama).
  // hidden_layers: the outputs of these decoder layers (ids in [0, num_hidden_layers), the
  // residual stream after each) in hidden_states, in that order (transformers'
  // output_hidden_states[i + 1]), for a distillation loss on intermediate layers.
  // positions (B,T) int64, when defined: document masking, as LlamaImpl::forward's (each
  // document's positions restart at 0; its tokens attend within it and rotate by their positions).
  Qwen3MoeOutput forward(const at::Tensor& tokens, const at::Tensor& targets,
                         bool output_router_logits,
                         const std::vector<int64_t>& hidden_layers = {},
                         const at::Tensor& positions = {});
  // The logits (B,t,V) of tokens (B,t) at positions cache.length onwards, attending to the
  // cached tokens too; their keys and values are appended (kv_cache.h). Sampling's forward.
  at::Tensor forward(const at::Tensor& tokens, KVCache& cache);

  // Redraws every weight from cfg.seed (normal(0, initializer_range), norms at 1); on an FSDP
  // root (expert parallel or not) each rank draws its shards' rows only, bit for bit those of
  // the whole model (fsdpp::init_exact).
  void init_weights();
  // What init_weights draws, in parameter order, with the whole shapes (before expert
  // parallelism keeps a rank's experts).
  const InitPlan& init_plan() const { return plan_; }
  const Qwen3MoeConfig& config() const { return cfg_; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};  // of Qwen3MoeDecoderLayer
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when cfg.tie_word_embeddings
  // The load-balancing loss over the global batch (data and expert parallelism); null: this
  // batch's.
  std::shared_ptr<Qwen3MoeParallelHooks> parallel;
  // Tensor parallelism: the vocabulary-parallel embedding, head and loss (logits are this rank's
  // vocabulary columns); null runs whole.
  std::shared_ptr<LlamaParallelHooks> tensor_parallel;

 private:
  Qwen3MoeConfig cfg_;
  InitPlan plan_;
};
TORCH_MODULE(Qwen3Moe);

// The rotary tables cos, sin (T, head_dim) in rotate-half layout, in like's dtype and on its
// device, as the model computes them once per forward (pipeline stages do too).
std::pair<at::Tensor, at::Tensor> qwen3_moe_rope(const Qwen3MoeConfig& cfg, int64_t T,
                                                 const at::Tensor& like);
// The same at each token's position (B,T) (all below max_position + 1): (B,T,head_dim) each.
std::pair<at::Tensor, at::Tensor> qwen3_moe_rope(const Qwen3MoeConfig& cfg,
                                                 const at::Tensor& positions, int64_t max_position,
                                                 const at::Tensor& like);

// Document masking's per-forward part (the model's and a pipeline stage's): the positions
// (B,T) int64 checked against `tokens` (the sizes of the whole sequence's tokens) and
// max_position_embeddings (ConfigError), their RoPE rows in like's dtype and the mask
// (B,1,T,T) bool, all on like's device.
struct Qwen3MoeDocumentMask {
  at::Tensor cos, sin;  // (B,T,head_dim)
  at::Tensor mask;      // (B,1,T,T)
};
Qwen3MoeDocumentMask qwen3_moe_document_mask(const Qwen3MoeConfig& cfg, const at::Tensor& positions,
                                         at::IntArrayRef tokens, const at::Tensor& like);

// transformers' load_balancing_loss_func without an attention mask (Switch Transformer eq. 4-6
// over all sparse layers' tokens together): num_experts * sum_e f_e * P_e, with f_e the fraction
// of top-k choices that went to e and P_e the mean router probability of e. Not yet multiplied by
// router_aux_loss_coef. Computed in float32.
at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts,
                               int64_t top_k);

// The same in two steps, for statistics summed over ranks (data, expert and sequence
// parallelism) or carried from pipeline stage to stage: the sums the loss is made of, (2E+1)
// float32 [top-k choices per expert (no gradient), router probabilities summed per expert, rows],
// which add up over layers and tokens; then the loss of such sums (0 without rows).
at::Tensor router_statistics(const std::vector<at::Tensor>& router_logits, int64_t num_experts,
                             int64_t top_k);
at::Tensor load_balancing_loss(const at::Tensor& statistics, int64_t num_experts);

}  // namespace fsdpp::models
