#pragma once
// The parameters a model's plan splits under tensor parallelism, read without a group or a
// change: what the estimate knows of a model it has no shape of (estimate/plan_description.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace fsdpp::models {
class ModelPlan;
}

namespace fsdpp::parallel {

// By name under plan.module(), the dimension each is split along (evenly over the tp group,
// tp::shard_range): a sequential_plan's from its styles (tp::split_dims). nullopt for a plan
// that does not say (fsdpp's language models, whose estimate reads their shape).
std::optional<std::map<std::string, int64_t>> tensor_parallel_splits(const models::ModelPlan& plan);

}  // namespace fsdpp::parallel
