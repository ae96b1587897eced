#include "fsdpp/fsdp/wrap_policy.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {

namespace {

// "fsdpp::models::TransformerBlockImpl" -> "TransformerBlock": no namespace, no "Impl".
std::string bare_class_name(std::string_view name) {
  if (auto pos = name.rfind("::"); pos != std::string_view::npos) name.remove_prefix(pos + 2);
  if (name.size() > 4 && name.ends_with("Impl")) name.remove_suffix(4);
  return std::string(name);
}

}  // namespace

std::string module_class_name(const torch::nn::Module& module) {
  return bare_class_name(module.name());
}

bool module_class_is(const torch::nn::Module& module, std::string_view name) {
  return bare_class_name(module.name()) == bare_class_name(name);
}

std::vector<std::string> module_classes(const torch::nn::Module& root) {
  std::set<std::string> classes{module_class_name(root)};
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    // fsdpp's own children (the unit "_fsdp", the checkpoint marker "_fsdp_checkpoint") are
    // not the model's classes.
    const auto& path = item.key();
    const auto last = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    if (!last.starts_with("_fsdp")) classes.insert(module_class_name(*item.value()));
  }
  return {classes.begin(), classes.end()};
}

namespace {

bool class_in(const torch::nn::Module& module, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return module_class_is(module, n); });
}

}  // namespace

WrapPolicy transformer_layer_policy(std::vector<std::string> class_names) {
  FSDPP_CHECK_AS(ConfigError, !class_names.empty(),
                 "[fsdp] transformer_layer_policy needs at least one class name");
  return [names = std::move(class_names)](const std::string&, torch::nn::Module& m, int64_t) {
    return class_in(m, names);
  };
}

WrapPolicy size_based_policy(int64_t min_num_params, std::vector<std::string> candidates) {
  FSDPP_CHECK_AS(ConfigError, min_num_params >= 1,
                 "[fsdp] size_based_policy: min_num_params={} must be >= 1", min_num_params);
  return [min_num_params, names = std::move(candidates)](const std::string&, torch::nn::Module& m,
                                                         int64_t unwrapped) {
    return unwrapped >= min_num_params && class_in(m, names);
  };
}

namespace {

// Post-order: children first, so that a parent sees what its children left unwrapped.
// Returns the parameters under `module` not in a unit (each once); `make_unit(path, module,
// params)` is called for every module the policy chooses, with the parameters it takes.
using MakeUnit = std::function<void(const std::string&, torch::nn::Module&, std::vector<at::Tensor>)>;

std::vector<at::Tensor> wrap_below(const std::string& path, torch::nn::Module& module,
                                   const WrapPolicy& policy, const MakeUnit& make_unit,
                                   std::unordered_set<const c10::TensorImpl*>& counted) {
  std::vector<at::Tensor> unwrapped;
  for (const auto& child : module.named_children()) {
    if (child.key() == FSDPUnit::kChildName) continue;
    const std::string child_path = path.empty() ? child.key() : path + "." + child.key();
    auto below = wrap_below(child_path, *child.value(), policy, make_unit, counted);
    unwrapped.insert(unwrapped.end(), below.begin(), below.end());
  }
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (counted.insert(p.value().unsafeGetTensorImpl()).second) unwrapped.push_back(p.value());
  }
  int64_t numel = 0;
  for (const auto& p : unwrapped) numel += p.numel();
  if (!path.empty() && !find_unit(module) && policy(path, module, numel)) {
    make_unit(path, module, std::move(unwrapped));
    return {};
  }
  return unwrapped;
}

}  // namespace

std::vector<std::string> apply_fully_shard(torch::nn::Module& root, const WrapPolicy& policy,
                                           const FullyShardOptions& options) {
  return apply_fully_shard(root, policy, options, options);
}

std::vector<std::string> apply_fully_shard(torch::nn::Module& root, const WrapPolicy& policy,
                                           const FullyShardOptions& options,
                                           const FullyShardOptions& root_options) {
  std::vector<std::string> made;
  std::unordered_set<const c10::TensorImpl*> counted;
  if (policy) {
    wrap_below("", root, policy,
               [&](const std::string& path, torch::nn::Module& m, std::vector<at::Tensor>) {
                 fully_shard(m, options);
                 made.push_back(path);
               },
               counted);
  }
  fully_shard(root, root_options);
  made.emplace_back();
  return made;
}

std::vector<PlannedUnit> plan_units(torch::nn::Module& root, const WrapPolicy& policy) {
  std::vector<PlannedUnit> units;
  std::unordered_set<const c10::TensorImpl*> counted;
  auto rest = wrap_below("", root, policy ? policy : WrapPolicy([](auto&&...) { return false; }),
                         [&](const std::string& path, torch::nn::Module&, std::vector<at::Tensor> params) {
                           units.push_back({path, std::move(params)});
                         },
                         counted);
  units.push_back({"", std::move(rest)});
  return units;
}

void keep_ends_gathered(torch::nn::Module& root, const std::vector<std::string>& made) {
  set_reshard_after_forward(root, false);
  if (made.size() < 2) return;
  const std::string& last = made[made.size() - 2];
  for (const auto& item : root.named_modules()) {
    if (item.key() == last) set_reshard_after_forward(*item.value(), false);
  }
}

}  // namespace fsdpp
