#pragma once
// A planned layout (fsdpp/estimate/step_time.h's PlanEntry options) as the fsdpp-train overrides
// that run it, and the fsdpp-run command line: what fsdpp-plan and fsdpp-estimate --budget print
// under each row. The inverse of configured_estimate (memory_check.h): a config given these
// overrides is estimated and timed as the row was (tests/unit/test_plan_overrides.cpp).
//
//   layout_overrides(plan.fitting[0].options)
//   // {"training.fsdp=shard_grad_op", "parallelism.tensor_parallel_degree=2", ...}

#include <string>
#include <vector>

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp::train {

// Every key a layout sets, whatever the config held: the strategy, the parallelism: degrees
// (replicas of shard groups for HYBRID_SHARD), sequence parallelism, the pipeline's schedule and
// microbatch size, checkpointing, the batch per data-parallel rank (no accumulation), the
// sequence length and the mixed precision. ConfigError for options fsdpp-train cannot be given
// (a reduction in the parameters' low precision: fsdpp-train reduces in float32).
std::vector<std::string> layout_overrides(const EstimateOptions& options);

// Of layout_overrides(options), those that change the fsdpp-train config at `config_path` given
// its own overrides `given`: what a row of a YAML's plan prints (the keys the config already has
// left out; a key that cannot be applied alone is kept).
std::vector<std::string> layout_overrides_for(const std::string& config_path,
                                              const std::vector<std::string>& given,
                                              const EstimateOptions& options);

// `fsdpp-run --nproc-per-node P [--nnodes N] fsdpp-train CONFIG ARGS... OVERRIDES...` for
// `world` ranks, P = min(world, per_node) a node.
std::string layout_command(int world, int per_node, const std::string& config,
                           const std::vector<std::string>& args,
                           const std::vector<std::string>& overrides);

}  // namespace fsdpp::train
