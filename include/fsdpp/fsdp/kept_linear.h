#pragma once
// A projection whose product selective activation checkpointing keeps (CheckpointOptions::
// keep_products, fsdp/activation_checkpoint.h):
//
//   at::Tensor q = fsdpp::kept_linear(q_proj, x);   // in a checkpointed module's forward
//
// Outside a selective checkpoint it is linear(x). In a selective checkpoint's first forward it
// is linear(x), and the product is kept; in the recomputation inside backward it is that kept
// product, not computed again, whose backward is x W^T's (the same two products as at::linear's
// backward, so the gradients are bit-equal). Everything between the kept products (norms, RoPE,
// attention, activations) is recomputed, and kept nothing of in between.
#include <ATen/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace fsdpp {

// linear(x) for a bias-free linear, kept across a selective checkpoint's recomputation.
at::Tensor kept_linear(torch::nn::Linear& linear, const at::Tensor& x);

}  // namespace fsdpp
