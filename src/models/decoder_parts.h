#pragma once
// Private to src/models: what fsdpp's decoders (llama.cpp, qwen3_moe.cpp) share below the level
// of a module.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <string_view>

#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/float8_linear.h"

namespace fsdpp::models::detail {

// A bias-free projection x W^T: LibTorch's linear, its product kept by selective activation
// checkpointing (fsdp/kept_linear.h), or float8's GEMMs (fsdp/float8_linear.h; a float8
// projection is computed again in a selective checkpoint's recomputation).
at::Tensor project(torch::nn::Linear& linear, const at::Tensor& x, Float8Recipe float8);

// Normalisation, rotary and loss maths in at least float32, as Meta's reference does for bf16.
inline at::ScalarType compute_dtype(const at::Tensor& x) {
  return at::promote_types(x.scalar_type(), at::kFloat);
}

// ConfigError "[models] <config>.<field>=<value> is not positive; expected > 0" unless
// value > 0; the floating-point form says "is not a positive number" (and refuses NaN and inf).
void check_positive(std::string_view config, std::string_view field, int64_t value);
void check_positive_number(std::string_view config, std::string_view field, double value);

// ---- document masking (packed sequences: TRL's padding_free, transformers' position_ids) ----
//
// positions (B,T) int64 hold each token's position in its document, restarting at 0 where a
// document starts; a document is a run of tokens that starts at a position 0 (tokens before a
// row's first 0 are one more). With positions, token i attends to the tokens j <= i of its own
// document only, and RoPE rotates it by its position: each document computes what it would alone.

// Throws ConfigError naming `model` unless positions is (B,T) int64 of the tokens' sizes with
// values in [0, limit) (`limit_name`: the config field that sets limit). Returns the largest
// position. One host sync: the caller does it once per forward.
int64_t check_positions(const at::Tensor& positions, at::IntArrayRef tokens, int64_t limit,
                        std::string_view model, std::string_view limit_name);

// (B,T) positions -> (B,1,T,T) bool, true where query i may attend to key j: j <= i in the same
// document. Made once per forward and handed to every layer (it does not depend on the layer).
at::Tensor document_causal_mask(const at::Tensor& positions);

// Attention of q, k, v (B,H,T,D): causal (SDPA's is_causal, its fastest kernels) when `mask` is
// undefined, else with the boolean mask of document_causal_mask. Scaled by D^-0.5.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask);

// The rows of a RoPE table (P, ...) at each token's position: (B,T) -> (B,T, ...). The same
// values as the rows 0 .. T-1 that a document alone reads, so its rotations are bit-equal.
at::Tensor rows_at(const at::Tensor& table, const at::Tensor& positions);

// (B,T,Hkv,D) -> (B,T,Hkv*n_rep,D): kv head j serves query heads j*n_rep .. (j+1)*n_rep-1.
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

// RoPE's rotation of the pairs (x0, x1) = xc[..., 0], xc[..., 1] of xc (B,T,H,D/2,2) by the
// angles whose cos c and sin s (broadcast against (B,T,H,D/2)) are given, as (B,T,H,D):
// (x0 c - x1 s, x0 s + x1 c). rotate_pairs in real ops (the CPU's, bit-equal to Meta's reference
// formula); rotate_pairs_complex as one complex multiply (x0 + i x1)(c + i s): a GPU's, one
// kernel forward and one backward where the real ops take about ten (measured on an H200: RoPE
// was a sixth of a 1B Llama's step). The two agree to float32 rounding (a fused multiply-add).
at::Tensor rotate_pairs(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s);
at::Tensor rotate_pairs_complex(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s);

// Draws every weight of a model by its plan (fsdpp/fsdp/deferred_init.h), in float32 on the CPU
// from a private generator whatever the parameters' dtype and device, so that the values depend
// on the seed alone: on an FSDP root (fully_shard-ed, tensor or expert parallel or not) each
// rank draws its shards' rows only, bit for bit those of the whole model (init_exact).
void draw_weights(torch::nn::Module& model, const InitPlan& plan);

// torch::nn::Linear and Embedding draw their default init from the global generator; a model's
// weights come from its own generator, so its constructor puts the global one back as it found
// it. The generator's mutex guards against ranks-as-threads building models at the same time.
class GlobalRngRestorer {
 public:
  GlobalRngRestorer();
  ~GlobalRngRestorer();
  GlobalRngRestorer(const GlobalRngRestorer&) = delete;
  GlobalRngRestorer& operator=(const GlobalRngRestorer&) = delete;

 private:
  at::Tensor state_;
};

}  // namespace fsdpp::models::detail
