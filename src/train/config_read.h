#pragma once
// TrainConfig::from_yaml_string without its validate(): for a caller that checks keys of its own
// first (custom_config refuses what a custom model cannot have before the checks that are about
// fsdpp-train's models). Private to src/train.

#include <string>
#include <vector>

#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

TrainConfig read_config(const std::string& yaml, const std::vector<std::string>& overrides,
                        const std::string& source_name);

}  // namespace fsdpp::train::detail
