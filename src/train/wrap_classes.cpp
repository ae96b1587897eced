#include "wrap_classes.h"

#include <algorithm>

#include "fsdpp/fsdp/wrap_policy.h"

namespace fsdpp::train::detail {

std::optional<MissingWrapClass> missing_wrap_class(const TrainConfig& cfg, torch::nn::Module& model) {
  const auto& t = cfg.training;
  const auto& fc = t.fsdp_config;
  if (fc.auto_wrap_policy != AutoWrapPolicy::TRANSFORMER_BASED_WRAP && !t.gradient_checkpointing) {
    return std::nullopt;
  }
  const auto modules = model.modules(/*include_self=*/true);
  for (const auto& name : fc.transformer_layer_cls_to_wrap) {
    const bool found = std::any_of(modules.begin(), modules.end(),
                                   [&](const auto& m) { return module_class_is(*m, name); });
    if (found) continue;
    std::string classes;
    for (const auto& c : module_classes(model)) classes += (classes.empty() ? "" : ", ") + c;
    return MissingWrapClass{name, classes};
  }
  return std::nullopt;
}

}  // namespace fsdpp::train::detail
