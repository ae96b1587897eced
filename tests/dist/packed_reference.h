#pragma once
// What the 2-rank tests of document masking and of the global token mean share
// (tests/dist/test_document_mask.cpp, test_token_mean.cpp): a layout's step on this
// data-parallel rank's rows, and its gradients or parameters gathered whole by name to compare
// with one process.

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/parallel/parallelize.h"
#include "parallelize_cells.h"

namespace fsdpp::test::packed {

// This data-parallel rank's rows of a global batch of kMicro microbatches of kRows rows each
// (the rows of microbatch m one after another): its part of every microbatch, in order.
inline at::Tensor my_part(parallel::Parallelized& p, const at::Tensor& global) {
  const auto& dp = p.mesh().group("dp");
  const int64_t per_micro = global.size(0) / cells::kMicro, n = per_micro / dp->size();
  std::vector<at::Tensor> parts;
  for (int m = 0; m < cells::kMicro; ++m) {
    parts.push_back(global.narrow(0, m * per_micro + dp->rank() * n, n));
  }
  return at::cat(parts).contiguous();
}

// Every parameter this rank's stages hold, whole, by name: `of` picks the tensor laid out like
// its shard (the parameter's data, or its gradient). Collective over the groups that split them.
template <typename Of>
std::map<std::string, at::Tensor> gathered(parallel::Parallelized& p, Of of) {
  std::vector<const ShardedParam*> views;
  std::vector<at::Tensor> locals;
  for (const auto& r : p.record()) {
    views.push_back(&r.view);
    locals.push_back(of(r.view));
  }
  const auto whole = gather_full(views, locals);
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < views.size(); ++i) out[views[i]->fqn] = whole[i].cpu();
  return out;
}

inline std::map<std::string, at::Tensor> gathered_grads(parallel::Parallelized& p) {
  return gathered(p, [](const ShardedParam& v) {
    return v.param.grad().defined() ? v.param.grad() : at::zeros_like(v.local_shard);
  });
}

inline std::map<std::string, at::Tensor> gathered_params(parallel::Parallelized& p) {
  return gathered(p, [](const ShardedParam& v) { return v.local_shard.detach(); });
}

// The largest difference over the tensors of `got` (this rank's) from those of `want`.
inline double worst_of(const std::map<std::string, at::Tensor>& got,
                       const std::map<std::string, at::Tensor>& want, std::string* where) {
  double worst = 0;
  for (const auto& [name, g] : got) {
    const auto it = want.find(name);
    if (it == want.end()) {
      *where = name + " missing from the reference";
      return INFINITY;
    }
    const double d = (g - it->second).abs().max().item<double>();
    if (d > worst) *where = name;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace fsdpp::test::packed
