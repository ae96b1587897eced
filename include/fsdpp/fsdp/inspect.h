#pragma once
// What FSDP holds right now, for tests, logs and the memory estimator.

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp {

struct UnitInfo {
  std::string name;                   // module path from the root ("(root)" for the root)
  int64_t num_params = 0;
  int64_t numel = 0;                  // unsharded elements
  int64_t shard_numel = 0;            // this rank's elements, padding included
  int64_t unsharded_bytes = 0;        // unsharded parameter storage allocated now
  bool gather_in_flight = false;      // a (prefetched) all-gather issued and not yet used
  int shard_world = 1;
  std::vector<std::string> param_names;
};

// Units under `root`, in forward order of their modules (root first).
std::vector<UnitInfo> inspect_units(torch::nn::Module& root);

// Every parameter at full size with its name from the root, on every rank (collective).
std::vector<std::pair<std::string, at::Tensor>> full_parameters(torch::nn::Module& root);

// Communication counters summed over the distinct groups the units use.
dist::CommCounters comm_counters(torch::nn::Module& root);

}  // namespace fsdpp
