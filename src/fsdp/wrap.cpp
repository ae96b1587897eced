#include "fsdpp/fsdp/wrap.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"

namespace fsdpp::fsdp {
namespace {

// Every name in `classes` must be the class of some module of `model`: one that matches nothing
// would leave the whole model one unit without a word.
void check_classes_exist(torch::nn::Module& model, const std::vector<std::string>& classes) {
  for (const auto& name : classes) {
    bool found = false;
    for (const auto& m : model.modules(/*include_self=*/false)) found = found || module_class_is(*m, name);
    FSDPP_CHECK_AS(ConfigError, found,
                   "[fsdp] wrap: no module of '{}' has class '{}'; the classes there: {} (write "
                   "them with or without \"Impl\", with or without the namespace)",
                   module_class_name(model), name, fmt::join(module_classes(model), ", "));
  }
}

FullyShardOptions unit_options(const WrapOptions& o) {
  FullyShardOptions f;
  f.mesh = o.mesh;
  f.strategy = o.strategy;
  f.sync_module_states = o.sync_module_states;
  f.mp_policy = o.mixed_precision;
  f.mp_policy.output_dtype.reset();  // the root's alone (WrapOptions::mixed_precision)
  f.offload_policy = o.offload;
  f.forward_prefetch = o.forward_prefetch;
  f.backward_prefetch = o.backward_prefetch;
  f.reduce_bucket_size = o.reduce_bucket_size;
  return f;
}

WrapPolicy policy_of(const WrapOptions& o) {
  if (o.layer_classes.empty()) return {};
  if (o.min_num_params > 0) return size_based_policy(o.min_num_params, o.layer_classes);
  return transformer_layer_policy(o.layer_classes);
}

void check_options(torch::nn::Module& model, const WrapOptions& o) {
  FSDPP_CHECK_AS(ConfigError, o.mesh,
                 "[fsdp] wrap: WrapOptions::mesh is not set; pass world->mesh() from "
                 "fsdpp::dist::init_from_env()");
  FSDPP_CHECK_AS(ConfigError, o.checkpoint_every >= 0,
                 "[fsdp] wrap: checkpoint_every={} must be >= 0 (0: no activation "
                 "checkpointing, k: every k-th module of layer_classes)",
                 o.checkpoint_every);
  FSDPP_CHECK_AS(ConfigError, o.checkpoint_every == 0 || !o.layer_classes.empty(),
                 "[fsdp] wrap: checkpoint_every={} needs layer_classes (the modules to "
                 "checkpoint)",
                 o.checkpoint_every);
  FSDPP_CHECK_AS(ConfigError, o.min_num_params >= 0,
                 "[fsdp] wrap: min_num_params={} must be >= 0", o.min_num_params);
  FSDPP_CHECK_AS(ConfigError, !traits_of(o.strategy).hybrid || o.mesh->ndim() == 2,
                 "[fsdp] wrap: {} needs a 2-D mesh with dims \"replicate\" and \"shard\" "
                 "(world->init_device_mesh({{nodes, ranks_per_node}}, {{\"replicate\", "
                 "\"shard\"}})); got a {}-D mesh",
                 to_string(o.strategy), o.mesh->ndim());
  check_classes_exist(model, o.layer_classes);
}

int64_t held_numel(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace

MixedPrecisionPolicy bf16() {
  MixedPrecisionPolicy p;
  p.param_dtype = at::kBFloat16;
  p.reduce_dtype = at::kFloat;
  p.output_dtype = at::kFloat;
  return p;
}

std::string Wrapped::describe() const {
  const size_t inner = units.empty() ? 0 : units.size() - 1;
  return fmt::format("{} over {} rank{}: {} unit{} and the root{}; {:.2f} M parameters, {:.2f} M "
                     "held per rank",
                     to_string(strategy), ranks, ranks == 1 ? "" : "s", inner,
                     inner == 1 ? "" : "s",
                     checkpointed.empty() ? ""
                                          : fmt::format(", {} checkpointed", checkpointed.size()),
                     params / 1e6, params_held / 1e6);
}

Wrapped wrap(torch::nn::Module& model, const WrapOptions& options) {
  check_options(model, options);
  Wrapped w;
  w.strategy = options.strategy;
  w.ranks = options.mesh->size();
  w.params = held_numel(model);
  if (options.checkpoint_every > 0) {
    w.checkpointed =
        apply_activation_checkpointing(model, options.layer_classes, options.checkpoint_every);
  }
  const FullyShardOptions inner = unit_options(options);
  FullyShardOptions root = inner;
  root.mp_policy.output_dtype = options.mixed_precision.output_dtype;
  w.units = apply_fully_shard(model, policy_of(options), inner, root);
  if (options.keep_ends_gathered) keep_ends_gathered(model, w.units);
  w.params_held = held_numel(model);
  return w;
}

ShardingStrategy zero_stage(int stage) {
  switch (stage) {
    case 0: return ShardingStrategy::NO_SHARD;
    case 1: return ShardingStrategy::ZERO1;
    case 2: return ShardingStrategy::SHARD_GRAD_OP;
    case 3: return ShardingStrategy::FULL_SHARD;
    default: break;
  }
  FSDPP_THROW(ConfigError,
              "[fsdp] ZeRO stage {} does not exist; expected 1 (optimizer state sharded), 2 (and "
              "gradients), 3 (and parameters) or 0 (plain data parallelism)",
              stage);
}

}  // namespace fsdpp::fsdp

namespace fsdpp {

fsdp::Wrapped ddp(torch::nn::Module& model, std::shared_ptr<dist::DeviceMesh> mesh,
                  const DdpOptions& options) {
  FSDPP_CHECK_AS(ConfigError, std::isfinite(options.bucket_cap_mb) && options.bucket_cap_mb >= 0,
                 "[fsdp] ddp: bucket_cap_mb={} must be >= 0 (0: one all-reduce after backward)",
                 options.bucket_cap_mb);
  fsdp::WrapOptions o;
  o.mesh = std::move(mesh);
  o.strategy = ShardingStrategy::NO_SHARD;
  o.mixed_precision = options.mixed_precision;
  o.sync_module_states = options.sync_module_states;
  // Buckets count elements; DDP's cap counts bytes of the reduced gradients.
  const auto reduced = options.mixed_precision.reduce_dtype.value_or(
      options.mixed_precision.param_dtype.value_or(at::kFloat));
  o.reduce_bucket_size = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024 /
                                              static_cast<double>(c10::elementSize(reduced)));
  return fsdp::wrap(model, o);
}

}  // namespace fsdpp
