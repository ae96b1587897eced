#pragma once
// Auto-wrap: choose the units of a model by rule instead of by hand, then shard the root.
//
// C++ modules have no forward hooks, so a module can be a unit only if its parent calls it
// through fsdpp::forward. Policies therefore choose among modules the model marks as
// callable that way (for fsdpp::models::Llama: TransformerBlock, Attention, FeedForward).

#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp {

// Decides whether `module` (at `path` from the root) becomes a unit; `unwrapped_numel` is the
// number of its parameter elements not already in a unit chosen below it.
using WrapPolicy =
    std::function<bool(const std::string& path, torch::nn::Module& module, int64_t unwrapped_numel)>;

// Every module whose class is one of `class_names` as module_class_is matches them
// ("TransformerBlock", "TransformerBlockImpl" or "fsdpp::models::TransformerBlockImpl"):
// FSDP's transformer_auto_wrap_policy.
WrapPolicy transformer_layer_policy(std::vector<std::string> class_names);

// Every module among `candidates` (class names as above) holding at least `min_num_params`
// parameter elements not already wrapped below it: FSDP's size_based_auto_wrap_policy.
WrapPolicy size_based_policy(int64_t min_num_params, std::vector<std::string> candidates);

// The class name as the policies see it: "fsdpp::models::TransformerBlockImpl" -> "TransformerBlock".
std::string module_class_name(const torch::nn::Module& module);

// Whether `module`'s class is `name` as a user writes it: with or without LibTorch's "Impl"
// suffix and with or without its namespace ("TransformerBlock", "TransformerBlockImpl" and
// "fsdpp::models::TransformerBlockImpl" all name fsdpp::models::TransformerBlockImpl).
bool module_class_is(const torch::nn::Module& module, std::string_view name);

// The classes of `root` and every module under it (module_class_name), each once, sorted: what
// an error about a class name that matched nothing lists.
std::vector<std::string> module_classes(const torch::nn::Module& root);

// Walks the tree bottom-up, calls fully_shard on every module the policy chooses, then on the
// root. Returns the paths of the units made (root last, as "").
std::vector<std::string> apply_fully_shard(torch::nn::Module& root, const WrapPolicy& policy,
                                           const FullyShardOptions& options);
// The same with the root's own options, e.g. mixed precision's output_dtype, which belongs to the
// model's output alone: inner units that returned it would hand the layers between them
// (norms, the head) another dtype than their parameters'.
std::vector<std::string> apply_fully_shard(torch::nn::Module& root, const WrapPolicy& policy,
                                           const FullyShardOptions& options,
                                           const FullyShardOptions& root_options);

// The units apply_fully_shard(root, policy, ...) would make, without making them: each unit's path
// (the root last, as "") and the parameters it would hold (each parameter once, in the unit
// nearest to it). What a memory estimate of a module of one's own starts from.
struct PlannedUnit {
  std::string path;
  std::vector<at::Tensor> params;
};
std::vector<PlannedUnit> plan_units(torch::nn::Module& root, const WrapPolicy& policy);

// After apply_fully_shard (`made`, its result): the root, whose backward comes first, and the
// last unit made (post-order: the last block), whose backward comes next, keep their parameters
// from forward to backward (set_reshard_after_forward(false)), since nothing computed before
// their backward could hide its all-gather: torchtitan's layout.
void keep_ends_gathered(torch::nn::Module& root, const std::vector<std::string>& made);

}  // namespace fsdpp
