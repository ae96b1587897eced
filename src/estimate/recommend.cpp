// The ZeRO paper's model-state figures and --budget's recommendation (memory_estimate.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {

ZeroModelStates zero_model_states(double psi, int n, double k) {
  FSDPP_CHECK_AS(ConfigError, n >= 1, "[estimate] world size {} is not positive", n);
  ZeroModelStates z;
  z.no_shard = (2 + 2 + k) * psi;
  z.zero1 = (2 + 2 + k / n) * psi;
  z.zero2 = (2 + (2 + k) / n) * psi;
  z.zero3 = (2 + 2 + k) * psi / n;
  return z;
}

Recommendation recommend(const ModelDescription& model, const EstimateOptions& base, int64_t budget) {
  Recommendation r;
  auto add = [&](std::string name, ShardingStrategy s, bool ckpt, bool offload) {
    Candidate c;
    c.name = std::move(name);
    c.options = base;
    c.options.strategy = s;
    c.options.replicas = 0;  // every candidate is one group, not HSDP's replicas of the config
    c.options.activation_checkpointing = ckpt;
    c.options.cpu_offload = offload;
    r.candidates.push_back(std::move(c));
  };
  add("NO_SHARD", ShardingStrategy::NO_SHARD, false, false);
  add("SHARD_GRAD_OP", ShardingStrategy::SHARD_GRAD_OP, false, false);
  add("FULL_SHARD", ShardingStrategy::FULL_SHARD, false, false);
  if (model.shape) add("FULL_SHARD + checkpointing", ShardingStrategy::FULL_SHARD, true, false);
  add(model.shape ? "FULL_SHARD + checkpointing + CPU offload" : "FULL_SHARD + CPU offload",
      ShardingStrategy::FULL_SHARD, model.shape.has_value(), true);
  const double gib = 1024.0 * 1024 * 1024;
  for (auto& c : r.candidates) {
    try {
      c.estimate = estimate_memory(model, c.options);
    } catch (const ConfigError& error) {  // a combination the estimate does not model (pipeline + offload, ...)
      c.why = fmt::format("not estimated: {}", error.what());
      continue;
    }
    const auto& e = c.estimate;
    c.fits = e.total <= budget;
    if (c.fits) {
      c.why = fmt::format("fits: {:.2f} GiB <= {:.2f} GiB, peak at {}", e.total / gib, budget / gib,
                          e.peak_at);
    } else {
      std::vector<std::pair<int64_t, std::string>> terms = {
          {e.parameters, "parameters"}, {e.gradients, "gradients"}, {e.optimizer_state, "optimizer state"},
          {e.unsharded, "unsharded units"}, {e.activations, "activations"}, {e.teacher, "teacher"},
          {e.runtime, "runtime"}};
      std::sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      c.why = fmt::format("needs {:.2f} GiB > {:.2f} GiB at its peak, {}; largest: {} {:.2f} GiB, {} {:.2f} GiB",
                          e.total / gib, budget / gib, e.peak_at, terms[0].second, terms[0].first / gib,
                          terms[1].second, terms[1].first / gib);
      if (c.options.cpu_offload && !c.options.device_is_gpu) c.why += " (offload frees nothing on a CPU device)";
    }
    if (c.fits && r.chosen < 0) r.chosen = static_cast<int>(&c - r.candidates.data());
  }
  return r;
}

}  // namespace fsdpp
