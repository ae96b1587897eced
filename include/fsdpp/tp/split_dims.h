#pragma once
// What a tensor-parallel plan (tp/plan.h) splits, read without a group or a change:
//
//   tp::split_dims(*model, {{"2", ParallelStyle::COLWISE}, {"4", ParallelStyle::ROWWISE}});
//   // {"2.weight": 0, "2.bias": 0, "4.weight": 1}
//
// Each parameter is split along that dimension evenly over the group (tp::shard_range), as
// parallelize_module splits it: what the estimate reads of a model it knows by its plan
// (estimate/plan_description.h).
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>

#include "fsdpp/tp/plan.h"

namespace fsdpp::tp {

// The parameters `plan` splits in `root`, by name, and the dimension each is split along; the
// plan checked as parallelize_module checks it (ConfigError naming the module).
std::map<std::string, int64_t> split_dims(const torch::nn::Module& root, const ParallelPlan& plan);

}  // namespace fsdpp::tp
