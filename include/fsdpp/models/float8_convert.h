#pragma once
// Float8 training of a decoder's projections (torchao's convert_to_float8_training, torchtitan's
// float8 converter): the q/k/v/o projections of every DecoderAttention and the gate/up/down
// projections of every SwiGLU (Llama's feed-forwards, Qwen3-MoE's dense MLPs) that the filter
// takes run their GEMMs in float8 (fsdp/float8_linear.h). Never converted: embeddings, the LM
// head, norms, Qwen3-MoE's router and its experts (their grouped GEMMs stay bf16). The weights
// stay what they are (float32 masters, bf16 under mixed precision), so state dicts and
// checkpoints are unchanged; only the GEMMs' operands are quantized, each step anew.
//
//   auto converted = models::convert_to_float8(model, {Float8Recipe::TENSORWISE});
//   // "layers.0.attention.wq", ... (before fully_shard: parallel::parallelize does it)
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "fsdpp/fsdp/float8_linear.h"

namespace fsdpp::models {

struct Float8Options {
  Float8Recipe recipe = Float8Recipe::OFF;
  Float8Filter filter = Float8Filter::AUTO;
};

// Sets the recipe on every projection the filter takes, under `model` (OFF puts every one back
// to LibTorch's linear). Returns the converted projections' names, in module order.
std::vector<std::string> convert_to_float8(torch::nn::Module& model, const Float8Options& options);

}  // namespace fsdpp::models
