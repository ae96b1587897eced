#pragma once
// The classes training.fsdp_config.fsdp_transformer_layer_cls_to_wrap names must be module
// classes of the model (as Accelerate requires) wherever they decide the FSDP units or what
// is checkpointed: a name that no module has would leave the whole model one unit, or nothing
// checkpointed, without a word. fsdpp-train's models (build_model.cpp) and a custom model
// (custom_model.cpp) each say it in their own terms.
#include <torch/nn/module.h>

#include <optional>
#include <string>

#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

struct MissingWrapClass {
  std::string name;     // the first name no module of the model has
  std::string classes;  // the model's module classes, ", "-separated
};

// Nothing when every name is a class of `model` (fsdpp::module_class_is: with or without
// LibTorch's "Impl" and namespace) or when the key decides nothing (no TRANSFORMER_BASED_WRAP
// and no gradient checkpointing).
std::optional<MissingWrapClass> missing_wrap_class(const TrainConfig& cfg, torch::nn::Module& model);

}  // namespace fsdpp::train::detail
