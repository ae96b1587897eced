#include "fsdpp/models/rms_norm.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "decoder_parts.h"

namespace fsdpp::models {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, at::Device device) : eps(eps) {
  weight = register_parameter(
      "weight", torch::ones({dim}, at::TensorOptions().device(device.is_meta() ? device : at::kCPU)));
}

// On a GPU, LibTorch's fused kernel (one pass forward and backward, fp32 inside, as
// torch.nn.RMSNorm runs there); elsewhere the same formula in ops, bit-equal to Hugging Face's
// LlamaRMSNorm (x in fp32, normalised, cast back, times the weight), which the parity tests hold.
at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const auto w = parallel ? parallel->norm_weight(weight) : weight;
  if (x.is_cuda() && w.scalar_type() == x.scalar_type()) return at::rms_norm(x, {x.size(-1)}, w, eps);
  auto xc = x.to(detail::compute_dtype(x));
  auto normed = xc * at::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * w;
}

}  // namespace fsdpp::models
