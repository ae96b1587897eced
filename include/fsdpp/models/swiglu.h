#pragma once
// The SwiGLU MLP of fsdpp's decoders, written once for Llama's feed_forward (llama.h:
// FeedForwardImpl) and Qwen3-MoE's dense mlp (qwen3_moe.h: Qwen3MoeMLPImpl; its sparse blocks'
// experts are SwiGLUs too, stacked: Qwen3MoeExpertsImpl): down(silu(gate x) * up x).

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "fsdpp/fsdp/float8_linear.h"
#include "fsdpp/models/decoder_hooks.h"

namespace fsdpp::models {

struct SwiGLUOptions {
  int64_t dim = 0, hidden = 0;
  // The gate, up and down projections' module names.
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  // Registration order (that of the parameters and the state dict): gate, up, down; or gate,
  // down, up (Meta's Llama: w1, w2, w3).
  bool down_before_up = false;
  // What the tensor-parallel hooks' enter and exit are told this module is.
  std::string where = "mlp";
};

class SwiGLUImpl : public torch::nn::Module {
 public:
  SwiGLUImpl(const SwiGLUOptions& options, at::Device device);
  // (B,T,C) -> (B,T,C). Without the hooks the down projection is fsdpp::tail_linear: a block
  // that opens a ResidualTail (fsdp/checkpoint_tail.h) skips it when it is recomputed.
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  std::shared_ptr<LlamaParallelHooks> parallel;  // tensor parallelism; null runs whole
  // The gate, up and down projections' GEMMs: LibTorch's linear (OFF) or float8's
  // (fsdp/float8_linear.h), set by models::convert_to_float8 (float8_convert.h).
  std::array<Float8Recipe, 3> float8{};

 private:
  std::string where_;
};

}  // namespace fsdpp::models
