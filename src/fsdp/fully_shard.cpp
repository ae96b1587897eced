#include "fsdpp/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <set>
#include <unordered_set>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"

namespace fsdpp {

const char* to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::FULL_SHARD: return "FULL_SHARD";
    case ShardingStrategy::SHARD_GRAD_OP: return "SHARD_GRAD_OP";
    case ShardingStrategy::ZERO1: return "ZERO1";
    case ShardingStrategy::NO_SHARD: return "NO_SHARD";
    case ShardingStrategy::HYBRID_SHARD: return "HYBRID_SHARD";
    case ShardingStrategy::HYBRID_SHARD_ZERO2: return "HYBRID_SHARD_ZERO2";
  }
  return "?";
}

ShardingStrategy parse_sharding_strategy(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "full_shard" || n == "zero3") return ShardingStrategy::FULL_SHARD;
  if (n == "shard_grad_op" || n == "zero2") return ShardingStrategy::SHARD_GRAD_OP;
  if (n == "zero1") return ShardingStrategy::ZERO1;
  if (n == "no_shard" || n == "ddp") return ShardingStrategy::NO_SHARD;
  if (n == "hybrid_shard" || n == "hybrid") return ShardingStrategy::HYBRID_SHARD;
  if (n == "hybrid_shard_zero2") return ShardingStrategy::HYBRID_SHARD_ZERO2;
  FSDPP_THROW(ConfigError,
              "[fsdp] unknown sharding strategy '{}'; expected full_shard, shard_grad_op, zero1, "
              "no_shard, hybrid_shard or hybrid_shard_zero2",
              name);
}

namespace {

// Rank 0's values everywhere: along each mesh dim from its coordinate-0 member, so that on a
// (R, S) mesh (0, s) first takes (0, 0)'s values and then every (r, s) takes (0, s)'s.
// Only the tensors this unit takes over: parameters of units made inside it are shards by now,
// and rank 0's would replace every rank's own shard (measured: a 2-rank run's losses moved by
// 5e-4).
void broadcast_from_rank0(torch::nn::Module& module, const dist::DeviceMesh& mesh,
                          const std::unordered_set<const c10::TensorImpl*>& managed) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : module.parameters()) {
    if (!managed.count(p.unsafeGetTensorImpl())) tensors.push_back(p);
  }
  for (auto& b : module.buffers()) tensors.push_back(b);
  for (int d = mesh.ndim() - 1; d >= 0; --d) {
    const auto& group = mesh.group(d);
    if (group->size() == 1) continue;
    for (auto& t : tensors) {
      auto c = t.contiguous();
      group->broadcast(c, 0, {"sync_module_states"});
      if (!c.is_same(t)) t.copy_(c);
    }
  }
}

FSDPUnit& root_unit(torch::nn::Module& root, const char* what) {
  FSDPUnit* unit = find_unit(root);
  FSDPP_CHECK(unit, "[fsdp] {} needs the root module given to fully_shard; module '{}' is not a "
              "unit", what, root.name());
  FSDPP_CHECK(unit->is_root(), "[fsdp] {} needs the root unit; '{}' is inside another unit",
              what, unit->name());
  return *unit;
}

}  // namespace

void fully_shard(torch::nn::Module& module, const FullyShardOptions& options) {
  FSDPP_CHECK_AS(ConfigError, options.mesh,
                 "[fsdp] FullyShardOptions::mesh is not set; pass world->mesh() from "
                 "fsdpp::dist::init_from_env()");
  FSDPP_CHECK(!find_unit(module), "[fsdp] module '{}' is already a unit; call fully_shard once "
              "per module", module.name());
  FSDPP_CHECK_AS(ConfigError,
                 options.forward_prefetch >= 0 && options.backward_prefetch_depth >= 0 &&
                     options.limit_all_gathers >= 0,
                 "[fsdp] forward_prefetch={}, backward_prefetch_depth={} and "
                 "limit_all_gathers={} must be >= 0",
                 options.forward_prefetch, options.backward_prefetch_depth,
                 options.limit_all_gathers);
  FSDPP_CHECK_AS(ConfigError, options.reduce_bucket_size >= 0,
                 "[fsdp] reduce_bucket_size={} must be >= 0 (elements per gradient bucket; 0: "
                 "one reduction per unit)",
                 options.reduce_bucket_size);
  std::unordered_set<const c10::TensorImpl*> managed;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    if (FSDPUnit* u = find_unit(*item.value())) {
      for (const auto& p : u->params()) managed.insert(p->param.unsafeGetTensorImpl());
    }
  }
  if (options.sync_module_states) broadcast_from_rank0(module, *options.mesh, managed);
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const auto* impl = item.value().unsafeGetTensorImpl();
    if (managed.count(impl) || !seen.insert(impl).second) continue;
    params.emplace_back(item.key(), item.value());
  }
  FSDPP_CHECK(!params.empty() || !managed.empty(),
              "[fsdp] module '{}' has no parameters; fully_shard needs at least one (shard the "
              "module that owns the parameters instead)",
              module.name());
  auto unit = std::make_shared<FSDPUnit>(module, options, std::move(params));
  unit->adopt_children();
  module.register_module(FSDPUnit::kChildName, unit);
}

void set_reshard_after_forward(torch::nn::Module& module, bool reshard) {
  FSDPUnit* unit = find_unit(module);
  FSDPP_CHECK(unit, "[fsdp] set_reshard_after_forward: module '{}' is not a unit; call it on a "
              "module given to fully_shard", module.name());
  unit->set_reshard_after_forward(reshard);
}

void set_requires_gradient_sync(torch::nn::Module& root, bool sync) {
  root_unit(root, "set_requires_gradient_sync").set_requires_gradient_sync(sync);
}

void unshard(torch::nn::Module& root) {
  const auto& units = root_unit(root, "unshard").all_units();
  for (auto* u : units) u->start_unshard();  // every gather in flight before the first wait
  for (auto* u : units) u->hold();
}

void reduce_gradients(torch::nn::Module& root) {
  const auto& units = root_unit(root, "reduce_gradients").all_units();
  // Last unit first, as backward would have issued them.
  for (auto it = units.rbegin(); it != units.rend(); ++it) (*it)->reduce_held_gradients();
  for (auto* u : units) u->finish_gradients();
}

void reshard(torch::nn::Module& root) {
  for (auto* u : root_unit(root, "reshard").all_units()) u->release();
}

std::vector<UnitInfo> inspect_units(torch::nn::Module& root) {
  std::vector<UnitInfo> out;
  for (auto* u : root_unit(root, "inspect_units").all_units()) {
    UnitInfo info;
    info.name = u->name();
    info.num_params = static_cast<int64_t>(u->params().size());
    info.shard_numel = u->shard_numel();
    info.unsharded_bytes = u->unsharded_bytes();
    info.gather_in_flight = u->gather_in_flight();
    info.shard_world = u->shard_world();
    for (const auto& p : u->params()) {
      info.numel += p->numel();
      info.param_names.push_back(p->fqn);
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> full_parameters(torch::nn::Module& root) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto* u : root_unit(root, "full_parameters").all_units()) {
    for (auto& kv : u->full_parameters()) out.push_back(std::move(kv));
  }
  return out;
}

dist::CommCounters comm_counters(torch::nn::Module& root) {
  std::set<dist::ProcessGroup*> groups;
  for (auto* u : root_unit(root, "comm_counters").all_units()) {
    if (u->shard_group()) groups.insert(u->shard_group().get());
    if (u->replicate_group()) groups.insert(u->replicate_group().get());
  }
  dist::CommCounters sum;
  for (auto* g : groups) {
    auto c = g->counters();
    for (int i = 0; i < dist::kNumCollectives; ++i) {
      sum.bytes[i] += c.bytes[i];
      sum.calls[i] += c.calls[i];
    }
  }
  return sum;
}

namespace detail {

FSDPUnit* unit_of(torch::nn::Module& module) { return find_unit(module); }
void pre_forward(FSDPUnit& unit) { unit.pre_forward(); }
std::vector<at::Tensor> post_forward(FSDPUnit& unit, std::vector<at::Tensor> outputs) {
  return unit.post_forward(std::move(outputs));
}
void forward_failed(FSDPUnit& unit) { unit.forward_failed(); }

namespace {

// The units inside `unit` whose forward returns another floating dtype than `unit` computes in
// (MixedPrecisionPolicy::output_dtype): what hands its layers mixed dtypes.
std::string mixed_dtype_hint(FSDPUnit& unit) {
  const auto& mp = unit.options().mp_policy;
  const at::ScalarType own =
      mp.param_dtype.value_or(unit.params().empty() ? at::kFloat
                                                    : unit.params().front()->param.scalar_type());
  std::vector<std::string> culprits;
  for (FSDPUnit* u : unit.root().units()) {
    const bool inside = u != &unit && (unit.is_root() || u->name().starts_with(unit.name() + "."));
    const auto& out = u->options().mp_policy.output_dtype;
    if (inside && out && *out != own) {
      culprits.push_back(fmt::format("'{}' returns {}", u->name(), c10::toString(*out)));
    }
  }
  if (culprits.empty()) return "";
  return fmt::format(". Inside it, unit {} (its MixedPrecisionPolicy::output_dtype) while '{}' "
                     "computes in {}: set output_dtype on the root only (fsdpp::fsdp::wrap does), "
                     "or to {} on the inner units",
                     fmt::join(culprits, ", unit "), unit.name(), c10::toString(own),
                     c10::toString(own));
}

}  // namespace

void rethrow_forward_error(FSDPUnit& unit) {
  try {
    throw;
  } catch (const Error&) {
    throw;  // fsdpp's own, already named
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw Error(fmt::format("[fsdp] the forward of unit '{}' failed: {}{}", unit.name(), what,
                            mixed_dtype_hint(unit)));
  }
}
at::Tensor cast_forward_input(FSDPUnit& unit, const at::Tensor& t) {
  return unit.cast_forward_input(t);
}

}  // namespace detail
}  // namespace fsdpp
