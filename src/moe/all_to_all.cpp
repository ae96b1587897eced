#include "fsdpp/moe/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <numeric>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/autograd_group.h"

namespace fsdpp::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using dist::load_group;
using dist::save_group;

at::Tensor exchange_rows(const at::Tensor& x, const GroupPtr& group,
                         const std::vector<int64_t>& output_splits,
                         const std::vector<int64_t>& input_splits, const std::string& what) {
  const int64_t rows = std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0});
  auto sizes = x.sizes().vec();
  sizes[0] = rows;
  auto out = at::empty(sizes, x.options());
  group->all_to_all_single(out, x.contiguous(), output_splits, input_splits, {what});
  return out;
}

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const GroupPtr& group,
                            const std::vector<int64_t>& output_splits,
                            const std::vector<int64_t>& input_splits, const std::string& what) {
    save_group(ctx, group, what);
    ctx->saved_data["output_splits"] = output_splits;
    ctx->saved_data["input_splits"] = input_splits;
    return exchange_rows(x, group, output_splits, input_splits, what);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = load_group(ctx);
    // The rows go back where they came from: what this rank received it now sends.
    auto out_splits = ctx->saved_data["input_splits"].toIntVector();
    auto in_splits = ctx->saved_data["output_splits"].toIntVector();
    return {exchange_rows(grads[0], g.group, out_splits, in_splits, g.what), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor all_reduce_sum(const at::Tensor& x, const GroupPtr& group, const std::string& what) {
  auto out = x.contiguous().clone();
  group->all_reduce(out, dist::ReduceOp::SUM, {what});
  return out;
}

struct SumOverRanks : torch::autograd::Function<SumOverRanks> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const GroupPtr& group,
                            const std::string& what) {
    save_group(ctx, group, what);
    return all_reduce_sum(x, group, what);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = load_group(ctx);
    return {all_reduce_sum(grads[0], g.group, g.what), at::Tensor(), at::Tensor()};
  }
};

void check_splits(const at::Tensor& x, const GroupPtr& group, const std::vector<int64_t>& out,
                  const std::vector<int64_t>& in, const std::string& what) {
  const auto n = static_cast<size_t>(group->size());
  FSDPP_CHECK_AS(ConfigError, out.size() == n && in.size() == n,
                 "[moe] {}: all_to_all_rows got {} output and {} input splits for a group of {} "
                 "ranks", what, out.size(), in.size(), n);
  FSDPP_CHECK_AS(ConfigError, x.dim() >= 1 &&
                                  std::accumulate(in.begin(), in.end(), int64_t{0}) == x.size(0),
                 "[moe] {}: the input splits add up to {} rows but the tensor has {}", what,
                 std::accumulate(in.begin(), in.end(), int64_t{0}), x.dim() ? x.size(0) : 0);
}

}  // namespace

at::Tensor all_to_all_rows(const at::Tensor& x, const GroupPtr& group,
                           std::vector<int64_t> output_splits, std::vector<int64_t> input_splits,
                           const std::string& what) {
  check_splits(x, group, output_splits, input_splits, what);
  return AllToAllRows::apply(x, group, output_splits, input_splits, what);
}

at::Tensor sum_over_ranks(const at::Tensor& x, const GroupPtr& group, const std::string& what) {
  return SumOverRanks::apply(x, group, what);
}

}  // namespace fsdpp::moe
