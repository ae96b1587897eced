#pragma once
// The self-attention of fsdpp's decoders, written once for Llama (llama.h: AttentionImpl) and
// Qwen3-MoE (qwen3_moe.h: Qwen3MoeAttentionImpl): q/k/v projections, on Qwen3 an RMSNorm over
// each head of q and k, the model's rotary embedding, causal grouped-query attention scaled by
// head_dim^-0.5 (within each document under document masking, or over a KV cache), the output
// projection. What differs between the models is an option (the projections' names, the
// per-head norms, the name the tensor-parallel hooks see) or, for the rotary embedding, a
// function each forward is given.

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fsdpp/fsdp/float8_linear.h"
#include "fsdpp/models/decoder_hooks.h"
#include "fsdpp/models/kv_cache.h"
#include "fsdpp/models/rms_norm.h"

namespace fsdpp::models {

struct DecoderAttentionOptions {
  int64_t dim = 0;  // the residual stream's width
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  // The q, k, v and output projections' module names, registered in this order.
  std::array<std::string, 4> names = {"q_proj", "k_proj", "v_proj", "o_proj"};
  // > 0: an RMSNorm of this eps over each head's head_dim on q and on k, before the rotary
  // embedding, registered after the projections as q_norm and k_norm (Qwen3's).
  double qk_norm_eps = 0;
  // What the tensor-parallel hooks' enter and exit are told this module is.
  std::string where = "self_attn";
};

class DecoderAttentionImpl : public torch::nn::Module {
 public:
  // The rotary embedding of q or k (B,T,heads,head_dim) at the tokens' positions.
  using Rotate = std::function<at::Tensor(const at::Tensor&)>;

  DecoderAttentionImpl(const DecoderAttentionOptions& options, at::Device device);

  // x (B,T,C) -> (B,T,C): causal, within each document when mask (B,1,T,T) bool is defined.
  // Under tensor parallelism between the hooks' enter (which gathers the sequence under
  // sequence parallelism: `rotate` and `mask` are the whole sequence's) and exit.
  at::Tensor attend(const at::Tensor& x, const Rotate& rotate, const at::Tensor& mask);
  // The same for tokens after the cached ones, attending to them too; x's keys and values are
  // appended to the cache (kv_cache.h). Without the hooks.
  at::Tensor attend_cached(const at::Tensor& x, const Rotate& rotate, KVCache::Layer& cache);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // null without qk_norm_eps
  // The heads this module computes: all of them, or this rank's under tensor parallelism.
  int64_t n_heads, n_kv_heads, head_dim;
  std::shared_ptr<LlamaParallelHooks> parallel;  // tensor parallelism; null runs whole
  // The q, k, v and output projections' GEMMs: LibTorch's linear (OFF) or float8's
  // (fsdp/float8_linear.h), set by models::convert_to_float8 (float8_convert.h).
  std::array<Float8Recipe, 4> float8{};

 private:
  // q, k, v (B,T,heads,head_dim) of x, q and k normed (when asked) and rotated.
  std::array<at::Tensor, 3> rotated_qkv(const at::Tensor& x, const Rotate& rotate);
  // The heads' outputs y (B,H,T,head_dim) through the output projection -> (B,T,C).
  at::Tensor project_out(const at::Tensor& y);

  std::string where_;
};

}  // namespace fsdpp::models
