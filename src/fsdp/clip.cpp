// The one gradient-norm clipping: the parameters grouped into parts by the groups their
// placements split them over, each part summed over those groups. See include/fsdpp/fsdp/clip.h.
#include "fsdpp/fsdp/clip.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "fsdpp/common/error.h"

namespace fsdpp {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

namespace {

// Parameters split over the same groups: their gradients are disjoint pieces of the whole over
// each of `split_over` (null entries and groups of one rank are skipped); empty: every rank
// holds them whole.
struct GradNormPart {
  std::vector<at::Tensor> params;
  std::vector<GroupPtr> split_over;
};

bool counts(const GroupPtr& g) { return g && g->size() > 1; }

// The groups the parts name, each once, in the order they first appear.
std::vector<GroupPtr> groups_in_order(const std::vector<GradNormPart>& parts) {
  std::vector<GroupPtr> out;
  for (const auto& part : parts) {
    for (const auto& g : part.split_over) {
      if (counts(g) && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    }
  }
  return out;
}

// The parts of sharded parameters: grouped by the groups their placements split them over (in
// placement order), each parameter once; replicas (replicate_group, outer_replicas) split
// nothing and so count once.
std::vector<GradNormPart> grad_norm_parts(const std::vector<ShardedParam>& params) {
  std::vector<GradNormPart> parts;
  for (const auto& p : params) {
    std::vector<GroupPtr> split;
    for (const auto& pl : p.placements) split.push_back(pl.group);
    auto it = std::find_if(parts.begin(), parts.end(),
                           [&](const GradNormPart& part) { return part.split_over == split; });
    if (it == parts.end()) {
      parts.push_back({{}, split});
      it = parts.end() - 1;
    }
    it->params.push_back(p.param);
  }
  return parts;
}

double clip_parts(const std::vector<GradNormPart>& parts, double max_norm, double norm_type,
                  const std::vector<GroupPtr>& across) {
  FSDPP_CHECK_AS(ConfigError, norm_type == 2.0 || std::isinf(norm_type),
                 "[fsdp] clip_grad_norm_ supports norm_type 2 and inf; got {}", norm_type);
  const bool inf = std::isinf(norm_type);
  const auto reduce = inf ? dist::ReduceOp::MAX : dist::ReduceOp::SUM;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  std::unordered_set<const void*> seen;
  // One value per part ([sum of squares] or [max]), in double so the order of summation matters
  // less, on the gradients' device (NCCL reduces device tensors); read back once.
  std::vector<std::vector<at::Tensor>> norms(parts.size());
  at::Device device = at::kCPU;
  for (size_t i = 0; i < parts.size(); ++i) {
    for (const auto& p : parts[i].params) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const auto& g = p.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      device = g.device();
      norms[i].push_back(at::linalg_vector_norm(g, inf ? INFINITY : 2.0, {}, false, at::kDouble));
    }
  }
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  std::vector<at::Tensor> values;
  for (auto& n : norms) {
    if (n.empty()) {
      values.push_back(at::zeros({}, f64));
    } else {
      auto stacked = at::stack(n).to(device);
      values.push_back(inf ? stacked.max() : stacked.square().sum());
    }
  }
  auto per_part = values.empty() ? at::zeros({0}, f64) : at::stack(values);
  for (const auto& g : groups_in_order(parts)) {
    std::vector<int64_t> mine;
    for (size_t i = 0; i < parts.size(); ++i) {
      const auto& over = parts[i].split_over;
      if (std::find(over.begin(), over.end(), g) != over.end()) mine.push_back(static_cast<int64_t>(i));
    }
    auto index = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(device);
    auto some = per_part.index_select(0, index);
    g->all_reduce(some, reduce, {"clip_grad_norm_"});
    per_part.index_copy_(0, index, some);
  }
  auto total = (per_part.numel() == 0 ? at::zeros({1}, f64)
                                      : (inf ? per_part.max() : per_part.sum()).reshape({1}));
  for (const auto& g : across) {
    if (counts(g)) g->all_reduce(total, reduce, {"clip_grad_norm_ (across)"});
  }
  double norm = total.item<double>();
  if (!inf) norm = std::sqrt(norm);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (auto& g : grads) g.mul_(coef);
  }
  return norm;
}

}  // namespace

double clip_grad_norm_(const std::vector<ShardedParam>& params, double max_norm, double norm_type,
                       const std::vector<GroupPtr>& across) {
  return clip_parts(grad_norm_parts(params), max_norm, norm_type, across);
}

double clip_grad_norm_(torch::nn::Module& root, double max_norm, double norm_type) {
  return clip_grad_norm_(sharded_params(root, "clip_grad_norm_"), max_norm, norm_type);
}

}  // namespace fsdpp
