#include "fsdpp/optim/nonfinite_grad.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp {
namespace {

at::Tensor on_group_device(at::Tensor t, const dist::ProcessGroup* group) {
  if (group && group->backend_kind() == dist::BackendKind::NCCL) return t.to(at::kCUDA);
  return t;
}

// 1 nan, 2 inf, 3 -inf: the first non-finite element of `g` (which has one).
int64_t kind_code(const at::Tensor& g) {
  const auto flat = g.reshape({-1});
  const auto bad = at::nonzero(at::logical_not(at::isfinite(flat)));
  const double v = flat[bad[0][0].item<int64_t>()].item<double>();
  if (std::isnan(v)) return 1;
  return v > 0 ? 2 : 3;
}

const char* kind_name(int64_t code) {
  switch (code) {
    case 1: return "nan";
    case 2: return "inf";
    case 3: return "-inf";
  }
  return "non-finite";
}

}  // namespace

std::optional<NonfiniteGrad> first_nonfinite_grad(torch::nn::Module& root,
                                                  dist::ProcessGroup* group) {
  at::NoGradGuard no_grad;
  const auto named = root.named_parameters(/*recurse=*/true);
  const int64_t n = static_cast<int64_t>(named.size());
  int64_t first = n;  // this rank's first index with a non-finite gradient shard
  int64_t code = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& g = named[i].value().grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (at::isfinite(g).all().item<bool>()) continue;
    first = i;
    code = kind_code(g);
    break;
  }
  const bool multi = group && group->size() > 1;
  // The ranks agree on the lowest index (MAX of n - index), then on the lowest rank that has
  // it and what it found there (MAX of (size - rank) * 4 + kind).
  if (multi) {
    auto t = on_group_device(at::full({1}, n - first, at::kLong), group);
    group->all_reduce(t, dist::ReduceOp::MAX, {"first_nonfinite_grad"});
    const int64_t global_first = n - t.cpu().item<int64_t>();
    const int64_t mine =
        global_first < n && first == global_first ? (group->size() - group->rank()) * 4 + code : 0;
    auto w = on_group_device(at::full({1}, mine, at::kLong), group);
    group->all_reduce(w, dist::ReduceOp::MAX, {"first_nonfinite_grad"});
    const int64_t v = w.cpu().item<int64_t>();
    if (global_first >= n) return std::nullopt;
    const int group_rank = static_cast<int>(group->size() - v / 4);
    return NonfiniteGrad{named[global_first].key(), kind_name(v % 4),
                         group->global_ranks()[group_rank]};
  }
  if (first >= n) return std::nullopt;
  return NonfiniteGrad{named[first].key(), kind_name(code), group ? group->global_rank() : 0};
}

}  // namespace fsdpp
