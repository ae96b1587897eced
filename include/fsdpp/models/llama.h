#pragma once
// A Llama-style decoder: RMSNorm, rotary position embedding, grouped-query attention, SwiGLU.
//
//   fsdpp::models::LlamaConfig cfg{.vocab_size = 256, .dim = 256, .n_layers = 4, .n_heads = 8};
//   fsdpp::models::Llama model(cfg);                     // weights drawn from cfg.seed
//   for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
//   fsdpp::fully_shard(model, opts);
//   auto out = fsdpp::forward(model, inputs, targets);   // out.logits (B,T,V), out.loss ()
//
// A model larger than one device is made on the meta device instead, sharded, and each rank's
// shards drawn with the same values (fsdpp/fsdp/deferred_init.h):
//   fsdpp::models::Llama model(cfg, at::kMeta);          // no storage, nothing drawn
//   ... fully_shard as above ...
//   fsdpp::to_empty(*model, at::kCPU);
//   model->init_weights();                               // = Llama(cfg)'s values, this rank's rows
//
// Parameter names follow Meta's / torchtitan's Llama (tok_embeddings.weight,
// layers.0.attention.wq.weight, layers.0.feed_forward.w1.weight, norm.weight, output.weight), and
// so does the rotary embedding: it rotates interleaved pairs (x[2i], x[2i+1]) of each head.
// Hugging Face checkpoints name the same tensors differently and store wq/wk with rotate-half
// row order; a converter maps names and permutes those rows.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <ATen/core/Generator.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/models/decoder_attention.h"
#include "fsdpp/models/decoder_hooks.h"
#include "fsdpp/models/generate.h"
#include "fsdpp/models/kv_cache.h"
#include "fsdpp/models/rms_norm.h"
#include "fsdpp/models/swiglu.h"

namespace fsdpp::models {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t dim = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 0;  // 0 = n_heads (plain multi-head attention); fewer = grouped-query
  int64_t ffn_hidden = 0;  // 0 = Llama's rule: 2/3 * 4 * dim, rounded up to multiple_of
  int64_t multiple_of = 32;
  int64_t max_seq_len = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  bool tie_embeddings = false;  // output projection reuses tok_embeddings.weight
  uint64_t seed = 0;            // weights depend on this alone, never on ranks or strategy
  double init_std = 0.02;

  // Throws ConfigError ("[models] LlamaConfig.<field>=<value> ...; expected ...").
  void validate() const;
  int64_t kv_heads() const { return n_kv_heads == 0 ? n_heads : n_kv_heads; }
  int64_t head_dim() const { return dim / n_heads; }
  int64_t ffn_hidden_dim() const;  // ffn_hidden, or Llama's rule when it is 0
};

// Causal self-attention with grouped-query heads and rotary position embedding (interleaved
// pairs), the decoders' attention (decoder_attention.h) under Meta's module names.
class AttentionImpl : public DecoderAttentionImpl {
 public:
  // The rotary tables are computed on the CPU whatever `device` is (they have storage on the
  // meta device too: derived from the config, not drawn).
  explicit AttentionImpl(const LlamaConfig& cfg, at::Device device = at::kCPU);
  at::Tensor forward(const at::Tensor& x);  // (B,T,C) -> (B,T,C)
  // Document masking: each token rotated by its position (B,T) int64 and attending within its
  // document only, through `mask` (B,1,T,T) bool (models' document_causal_mask, made once per
  // forward). Undefined positions: forward(x). Under sequence parallelism both are the whole
  // sequence's (attention gathers it).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& mask);
  // The same for tokens at positions cache.k's length onwards, attending to the cached ones
  // too, whose keys and values x's are appended to (kv_cache.h). Not under tensor parallelism.
  at::Tensor forward(const at::Tensor& x, KVCache::Layer& cache);

  // q_proj .. o_proj under the names they are registered with (wq, wk, wv, wo).
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  // (max_seq_len, head_dim/2): derived from the config, not learned. Registered as buffers so
  // that module.to(device) moves them; checkpoints skip them (see is_non_persistent_buffer).
  at::Tensor rope_cos, rope_sin;
};
TORCH_MODULE(Attention);

// SwiGLU: w2(silu(w1 x) * w3 x), the decoders' MLP (swiglu.h) under Meta's module names.
class FeedForwardImpl : public SwiGLUImpl {
 public:
  FeedForwardImpl(int64_t dim, int64_t hidden, at::Device device = at::kCPU);

  // gate_proj, down_proj and up_proj under the names they are registered with.
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

// Pre-norm residual block: h = x + attention(norm(x)); out = h + feed_forward(norm(h)).
class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const LlamaConfig& cfg, at::Device device = at::kCPU);
  at::Tensor forward(const at::Tensor& x);  // (B,T,C) -> (B,T,C)
  // Document masking: attention's forward(x, positions, mask).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& mask);
  at::Tensor forward(const at::Tensor& x, KVCache::Layer& cache);  // attention over the cache

  RMSNorm attention_norm{nullptr};
  Attention attention{nullptr};
  RMSNorm ffn_norm{nullptr};
  FeedForward feed_forward{nullptr};
};
TORCH_MODULE(TransformerBlock);

struct LlamaOutput {
  at::Tensor logits;  // (B,T,V)
  at::Tensor loss;    // () mean cross entropy over targets != -100; undefined without targets
  std::vector<at::Tensor> hidden_states;  // (B,T,C) outputs of the blocks asked for, in order
};
// Lets fsdpp::forward hook every tensor of the result (see fully_shard.h).
template <class F>
void fsdpp_visit_tensors(LlamaOutput& o, F&& f) {
  f(o.logits);
  if (o.loss.defined()) f(o.loss);
  for (auto& h : o.hidden_states) f(h);
}

class LlamaImpl : public torch::nn::Module {
 public:
  // Validates cfg; then the parameters on `device` with init_weights()' values, or on the meta
  // device without storage and undrawn (deferred initialisation: fully_shard, fsdpp::to_empty,
  // init_weights).
  explicit LlamaImpl(const LlamaConfig& cfg, at::Device device = at::kCPU);

  at::Tensor forward(const at::Tensor& tokens);  // (B,T) int64 -> logits (B,T,V)
  // Logits and the mean cross entropy against targets (B,T) int64; -100 marks ignored positions.
  LlamaOutput forward(const at::Tensor& tokens, const at::Tensor& targets);
  // The same (no loss when targets is undefined) with the outputs of the blocks
  // `hidden_layers` (ids in [0, n_layers), the residual stream after each) in that order:
  // transformers' output_hidden_states[i + 1], for a distillation loss on intermediate layers.
  // positions (B,T) int64, when defined: document masking (packed sequences, transformers'
  // position_ids as DataCollatorWithFlattening makes them): each document's positions restart at
  // 0, its tokens attend within it only and are rotated by their positions, so each document's
  // logits are those it has alone. Undefined: positions 0 .. T-1 and causal attention over the row.
  LlamaOutput forward(const at::Tensor& tokens, const at::Tensor& targets,
                      const std::vector<int64_t>& hidden_layers, const at::Tensor& positions = {});
  // The logits (B,t,V) of tokens (B,t) at positions cache.length onwards, attending to the
  // cached tokens too; their keys and values are appended and cache.length grows by t
  // (kv_cache.h). Sampling's forward; not under tensor parallelism.
  at::Tensor forward(const at::Tensor& tokens, KVCache& cache);

  // Redraws every weight from cfg.seed in a fixed order with a private generator: the same seed
  // gives the same model on any rank, under any world size or sharding strategy. On a model
  // that is an FSDP root (fully_shard-ed, tensor parallel or not) each rank draws its shards'
  // rows only, bit for bit those of the whole model (fsdpp::init_exact).
  void init_weights();
  // What init_weights draws, in order (normal(0, init_std) for the matrices, the residual
  // projections wo and w2 at init_std / sqrt(2 n_layers), ones for the norms), with the whole
  // shapes: for init_exact / init_per_shard on a model cut into pipeline stages.
  const InitPlan& init_plan() const { return plan_; }

  const LlamaConfig& config() const { return cfg_; }

  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};  // of TransformerBlock
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};  // null when cfg.tie_embeddings
  // Under tensor parallelism logits are this rank's vocabulary columns (fsdpp/models/llama_tp_plan.h).
  std::shared_ptr<LlamaParallelHooks> parallel;

 private:
  // The blocks' outputs `hidden_layers` go to *hidden; with a cache, attention over it.
  at::Tensor hidden_to_logits(const at::Tensor& tokens, const std::vector<int64_t>& hidden_layers = {},
                              std::vector<at::Tensor>* hidden = nullptr, KVCache* cache = nullptr,
                              const at::Tensor& positions = {});

  LlamaConfig cfg_;
  InitPlan plan_;
};
TORCH_MODULE(Llama);

// Mean cross entropy of logits (..., V) against targets (...), ignoring targets == -100;
// computed in float32 or wider whatever the logits' dtype. With divisor > 0: the sum over the
// tokens that are not ignored divided by `divisor` instead of their count (transformers'
// num_items_in_batch): a part of a batch divided by the batch's count, so that the parts' losses
// add up to the batch's mean (0 for a part without loss tokens).
at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                               double divisor = 0);

// True for buffers that are derived from the config (the rotary tables) and so belong in no
// checkpoint, as PyTorch's register_buffer(persistent=False).
bool is_non_persistent_buffer(std::string_view name);

// The number of parameter elements the module holds (shared tensors counted once). Under FSDP
// that is this rank's shards.
int64_t num_parameters(const torch::nn::Module& module);

// Autoregressive sampling: appends n_new tokens to prompt (T0) or (B,T0) and
// returns (B, T0 + n_new) (or (T0 + n_new) for a 1-D prompt). The context is cropped to the last
// max_seq_len tokens. temperature == 0 is greedy; top_k > 0 keeps the k most likely tokens.
// Runs the model through fsdpp::forward, so a sharded model works when every rank calls this
// with the same prompt and an identically seeded generator. With a KV cache (kv_cache.h) each
// new token is run alone, except under tensor parallelism and once the context is cropped.
at::Tensor generate(Llama& model, const at::Tensor& prompt, int64_t n_new, double temperature = 1.0,
                    int64_t top_k = 0, std::optional<at::Generator> generator = std::nullopt);

// The same with Hugging Face generate()'s other sampling knobs (fsdpp/models/generate.h).
at::Tensor generate(Llama& model, const at::Tensor& prompt, const GenerateOptions& options);

}  // namespace fsdpp::models
