#pragma once
// The RMSNorm of fsdpp's decoders (Meta's Llama's, transformers' LlamaRMSNorm and
// Qwen3MoeRMSNorm: the same maths).

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>

#include "fsdpp/models/decoder_hooks.h"

namespace fsdpp::models {

// x * rsqrt(mean(x^2) + eps) * weight, normalised in at least float32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, at::Device device = at::kCPU);
  at::Tensor forward(const at::Tensor& x);  // (..., dim) -> (..., dim)

  at::Tensor weight;  // (dim)
  double eps;
  std::shared_ptr<LlamaParallelHooks> parallel;
};
TORCH_MODULE(RMSNorm);

}  // namespace fsdpp::models
