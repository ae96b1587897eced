#include "fsdpp/tp/plan.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>


#include "fsdpp/common/error.h"
#include "fsdpp/tp/linear.h"
#include "fsdpp/tp/split_dims.h"

namespace fsdpp::tp {
namespace {

// Replaces the parameter's values by its slice [range) along dim, keeping the same tensor (so
// the module's member and its registered parameter stay one object).
Placement shard_param(at::Tensor& param, int64_t dim, const std::string& what,
                      const std::string& dim_name, const GroupPtr& group) {
  Placement p;
  p.sharded = true;
  p.dim = dim;
  p.full_size = param.size(dim);
  p.range = checked_shard(what, dim_name, p.full_size, group);
  torch::NoGradGuard no_grad;
  param.set_data(param.narrow(dim, p.range.offset, p.range.size).clone());
  return p;
}

}  // namespace

const char* to_string(ParallelStyle style) {
  return style == ParallelStyle::COLWISE ? "COLWISE" : "ROWWISE";
}

Placement TensorParallel::placement(const std::string& param_name) const {
  auto it = placements_.find(param_name);
  return it == placements_.end() ? Placement{} : it->second;
}

OuterLayoutOf TensorParallel::outer_layout(const torch::nn::Module& root,
                                          const std::string& mesh_dim) const {
  std::map<const void*, ShardPlacement> by_tensor;
  const auto params = root.named_parameters(/*recurse=*/true);  // find() points into it
  for (const auto& [name, pl] : placements_) {
    const auto* param = params.find(name);
    FSDPP_CHECK(param != nullptr, "[tp] outer_layout: the plan split '{}', which '{}' does not "
                "have; pass the module the plan was applied to", name, root.name());
    auto sp = balanced_placement(mesh_dim, group_, static_cast<int>(pl.dim), pl.full_size);
    FSDPP_CHECK(sp.begin_of(sp.rank) == pl.range.offset && sp.rows_of(sp.rank) == pl.range.size,
                "[tp] outer_layout: '{}' holds [{}, +{}) of {} but a balanced split gives [{}, "
                "+{})", name, pl.range.offset, pl.range.size, pl.full_size, sp.begin_of(sp.rank),
                sp.rows_of(sp.rank));
    by_tensor.emplace(param->unsafeGetTensorImpl(), std::move(sp));
  }
  return [by_tensor = std::move(by_tensor), group = group_](const at::Tensor& param) {
    OuterLayout layout;
    if (group->size() == 1) return layout;  // a group of one splits nothing
    auto it = by_tensor.find(param.unsafeGetTensorImpl());
    if (it != by_tensor.end()) {
      layout.placements.push_back(it->second);
    } else {
      layout.replicas.push_back(group);
    }
    return layout;
  };
}

namespace {

// One parameter a plan splits: the dimension, its name for messages, the module planned.
struct Split {
  int64_t dim = 0;
  const char* dim_name = "";
  std::string module;
};

// Every parameter `plan` splits in `root`, by name, each module checked (named, a Linear or an
// Embedding, not split already, a style it has) before anything is changed.
std::map<std::string, Split> planned_splits(const torch::nn::Module& root, const ParallelPlan& plan) {
  auto modules = root.named_modules("", /*include_self=*/false);
  std::map<std::string, Split> splits;
  for (const auto& [name, style] : plan) {
    auto* found = modules.find(name);
    FSDPP_CHECK_AS(ConfigError, found != nullptr,
                   "[tp] parallelize_module: the plan names '{}', which is not a submodule", name);
    auto& module = **found;
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&module)) {
      // The module's options keep the whole size: a weight of another shape was split before.
      const auto& lo = linear->options;
      FSDPP_CHECK_AS(ConfigError,
                     linear->weight.size(0) == lo.out_features() &&
                         linear->weight.size(1) == lo.in_features(),
                     "[tp] parallelize_module: '{}' has a weight of shape {} but is a Linear({}, "
                     "{}): it was split already (a plan applied twice?)",
                     name, linear->weight.sizes(), lo.in_features(), lo.out_features());
      if (style == ParallelStyle::COLWISE) {
        splits[name + ".weight"] = {0, "out_features", name};
        if (linear->bias.defined()) splits[name + ".bias"] = {0, "out_features", name};
      } else {
        splits[name + ".weight"] = {1, "in_features", name};
      }
    } else if (auto* emb = dynamic_cast<torch::nn::EmbeddingImpl*>(&module)) {
      FSDPP_CHECK_AS(ConfigError, emb->weight.size(0) == emb->options.num_embeddings(),
                     "[tp] parallelize_module: '{}' has {} rows but is an Embedding of {}: it "
                     "was split already (a plan applied twice?)",
                     name, emb->weight.size(0), emb->options.num_embeddings());
      FSDPP_CHECK_AS(ConfigError, style == ParallelStyle::ROWWISE,
                     "[tp] parallelize_module: '{}' is an Embedding planned {}; only ROWWISE "
                     "(split along the vocabulary) is supported",
                     name, to_string(style));
      splits[name + ".weight"] = {0, "vocab_size", name};
    } else {
      FSDPP_THROW(ConfigError,
                  "[tp] parallelize_module: '{}' is a {}; expected a Linear or an Embedding", name,
                  module.name());
    }
  }
  return splits;
}

}  // namespace

std::map<std::string, int64_t> split_dims(const torch::nn::Module& root, const ParallelPlan& plan) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, split] : planned_splits(root, plan)) out[name] = split.dim;
  return out;
}

TensorParallel parallelize_module(torch::nn::Module& root, const GroupPtr& group,
                                  const ParallelPlan& plan) {
  FSDPP_CHECK_AS(ConfigError, group != nullptr, "[tp] parallelize_module: no group");
  const auto splits = planned_splits(root, plan);
  auto params = root.named_parameters(/*recurse=*/true);
  std::map<std::string, Placement> placements;
  for (const auto& [name, split] : splits) {
    placements[name] = shard_param(params[name], split.dim, split.module, split.dim_name, group);
  }
  return TensorParallel(group, std::move(placements));
}

at::Tensor full_tensor(const at::Tensor& local, const Placement& p, const GroupPtr& group) {
  if (!p.sharded) return local;
  const int n = group->size();
  const int64_t chunk = shard_range(p.full_size, n, 0).size;  // the largest
  auto moved = local.detach().movedim(p.dim, 0);                // (size_r, ...)
  auto padded = at::zeros([&] {
    auto s = moved.sizes().vec();
    s[0] = chunk;
    return s;
  }(), moved.options());
  padded.narrow(0, 0, moved.size(0)).copy_(moved);
  auto sizes = padded.sizes().vec();
  sizes[0] *= n;
  auto gathered = at::empty(sizes, padded.options());
  group->all_gather_into_tensor(gathered, padded, {"tp.full_tensor"});
  std::vector<at::Tensor> parts;
  for (int r = 0; r < n; ++r) {
    parts.push_back(gathered.narrow(0, r * chunk, shard_range(p.full_size, n, r).size));
  }
  return at::cat(parts, 0).movedim(0, p.dim).contiguous();
}

std::map<std::string, at::Tensor> full_parameters(const torch::nn::Module& root,
                                                  const TensorParallel& tp) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : root.named_parameters()) {
    out[item.key()] = full_tensor(item.value(), tp.placement(item.key()), tp.group());
  }
  return out;
}

void load_full_parameters(torch::nn::Module& root, const TensorParallel& tp,
                          const std::map<std::string, at::Tensor>& full) {
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& item : root.named_parameters()) {
    auto it = full.find(item.key());
    FSDPP_CHECK_AS(ConfigError, it != full.end(),
                   "[tp] load_full_parameters: parameter '{}' is missing", item.key());
    const auto p = tp.placement(item.key());
    auto& dst = item.value();
    auto whole_shape = dst.sizes().vec();
    if (p.sharded) whole_shape[p.dim] = p.full_size;
    FSDPP_CHECK_AS(ConfigError, it->second.sizes().vec() == whole_shape,
                   "[tp] load_full_parameters: parameter '{}' has shape {}; expected the whole "
                   "shape {}",
                   item.key(), it->second.sizes(), at::IntArrayRef(whole_shape));
    dst.copy_(p.sharded ? it->second.narrow(p.dim, p.range.offset, p.range.size) : it->second);
    ++used;
  }
  FSDPP_CHECK_AS(ConfigError, used == full.size(),
                 "[tp] load_full_parameters: {} tensors given for {} parameters", full.size(),
                 used);
}

}  // namespace fsdpp::tp
