#pragma once
// Activation checkpointing: a block's forward keeps none of its activations (only its inputs),
// and backward runs the forward again to get them, trading one more forward for the memory.
//
//   fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"});      // every block
//   fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"}, 2);   // every 2nd
//   fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"}, 1,
//                                         {.keep_products = true});           // selective
//
// A marked module is checkpointed wherever it runs through fsdpp::forward(module, ...), under
// FSDP or not. Gradients are the same as without checkpointing (the recomputation replays the
// random number generators' states). When the module is an FSDP unit, its recomputation in
// backward gathers its parameters once and keeps them for the backward that follows, instead
// of resharding after the recomputed forward and gathering again (what PyTorch FSDP's
// checkpoint wrapper does).

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <vector>

namespace fsdpp {

struct CheckpointOptions {
  // Replays the CPU (and CUDA) generator state of the forward in the recomputation, so that
  // dropout masks match. Off saves a state copy per call when nothing random runs.
  bool preserve_rng_state = true;
  // Selective (op-level) checkpointing, torchtitan's selective "op" mode for matrix multiplies:
  // the products of the projections that run through fsdpp::kept_linear (fsdp/kept_linear.h;
  // fsdpp's decoders' q/k/v/o and MLP projections) are kept from the first forward, and the
  // recomputation computes only the rest (norms, RoPE, attention, activations), taking the
  // products back instead of multiplying again. Gradients stay bit-equal; memory lies between
  // no checkpointing and full checkpointing.
  bool keep_products = false;
};

// Marks one module (idempotent). Returns false when it already was.
bool checkpoint_module(torch::nn::Module& module, const CheckpointOptions& options = {});

// Marks every module under `root` (not root itself) for which check_fn(name, module) is true;
// returns the names marked, in module order.
std::vector<std::string> apply_activation_checkpointing(
    torch::nn::Module& root,
    const std::function<bool(const std::string& name, torch::nn::Module& module)>& check_fn,
    const CheckpointOptions& options = {});

// Marks every `every_k`-th module (the 1st, (k+1)-th, ...) whose class is one of class_names,
// written with or without LibTorch's "Impl" suffix and namespace ("TransformerBlock",
// "TransformerBlockImpl"; fsdpp::module_class_is). every_k = 1 marks all of them. A name that
// matches no module is a ConfigError listing the classes the model has.
std::vector<std::string> apply_activation_checkpointing(
    torch::nn::Module& root, const std::vector<std::string>& class_names, int every_k = 1,
    const CheckpointOptions& options = {});

// The functional form: runs fn(inputs) without keeping its activations when grad mode is on.
// Parameters that fn uses get their gradients in backward as without checkpointing.
std::vector<at::Tensor> checkpoint(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, const CheckpointOptions& options = {});

}  // namespace fsdpp
