#include "fsdpp/moe/dispatch.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp::moe {
namespace {

// Sums of consecutive blocks of `per` counts: rows per rank from counts per expert.
std::vector<int64_t> block_sums(const at::Tensor& host_counts, int64_t per) {
  const int64_t* c = host_counts.data_ptr<int64_t>();
  std::vector<int64_t> out(host_counts.numel() / per, 0);
  for (int64_t i = 0; i < host_counts.numel(); ++i) out[i / per] += c[i];
  return out;
}

}  // namespace

ExpertDispatch::ExpertDispatch(const at::Tensor& x, const at::Tensor& expert_ids,
                               int64_t num_experts, GroupPtr group, std::string what)
    : group_(std::move(group)), what_(std::move(what)) {
  const int ep = group_->size();
  FSDPP_CHECK_AS(ConfigError, num_experts > 0 && num_experts % ep == 0,
                 "[moe] {}: num_experts={} is not divisible by the expert-parallel degree {}; "
                 "each rank holds an equal number of experts",
                 what_, num_experts, ep);
  FSDPP_CHECK_AS(ConfigError, x.dim() == 2 && expert_ids.dim() == 2 &&
                                  expert_ids.size(0) == x.size(0) &&
                                  expert_ids.scalar_type() == at::kLong,
                 "[moe] {}: expected tokens (N,D) and int64 expert ids (N,k); got {} and {} of {}",
                 what_, x.sizes(), expert_ids.sizes(), c10::toString(expert_ids.scalar_type()));
  experts_per_rank = num_experts / ep;
  first_expert = group_->rank() * experts_per_rank;
  num_tokens_ = x.size(0);
  const int64_t k = expert_ids.size(1);
  // Pair p = n*k + j is token n's j-th choice; sorted by expert (stably, so each expert's
  // tokens stay in token order) the pairs are also sorted by the rank that holds the expert.
  const auto flat_ids = expert_ids.reshape({-1});
  order_ = at::argsort(flat_ids, /*stable=*/true);
  token_of_ = at::floor_divide(order_, k);
  const auto per_expert = at::bincount(flat_ids, /*weights=*/{}, num_experts).to(at::kLong);
  FSDPP_CHECK_AS(ConfigError, per_expert.numel() == num_experts,
                 "[moe] {}: an expert id is out of range; expected ids in [0, num_experts={})",
                 what_, num_experts);
  // 1. The counts: rank r learns how many rows each rank sends each of its experts, rank-major.
  auto recv_counts = at::empty_like(per_expert);
  group_->all_to_all_single(recv_counts, per_expert.contiguous(), {}, {}, {what_ + ".counts"});
  const auto sent_host = per_expert.to(at::kCPU);  // the host synchronisation
  const auto recv_host = recv_counts.to(at::kCPU);
  send_splits = block_sums(sent_host, experts_per_rank);
  recv_splits = block_sums(recv_host, experts_per_rank);
  permutation_ = expert_major_order(recv_host, experts_per_rank, x.device());
  tokens_per_expert = permutation_.tokens_per_expert;
  // 2. The rows, each pair's token once per choice, to the ranks of their experts.
  auto rows = x.index_select(0, token_of_);  // (N*k, D)
  auto received = all_to_all_rows(rows, group_, recv_splits, send_splits, what_);
  tokens = received.index_select(0, permutation_.indices);  // (M, D) expert-major
}

at::Tensor ExpertDispatch::combine(const at::Tensor& y, const at::Tensor& weights) const {
  FSDPP_CHECK_AS(ConfigError, y.dim() == 2 && y.size(0) == tokens.size(0),
                 "[moe] {}: combine got expert outputs {}; expected one row per dispatched row "
                 "({} rows)", what_, y.sizes(), tokens.size(0));
  // 3. Back to rank-major, then to the ranks the rows came from, in their sorted pair order.
  auto back = all_to_all_rows(y.index_select(0, permutation_.inverse), group_, send_splits,
                              recv_splits, what_);  // (N*k, D)
  const auto weight_of = weights.reshape({-1}).index_select(0, order_);
  auto weighted = back * weight_of.unsqueeze(1);
  auto out = at::zeros({num_tokens_, y.size(1)}, weights.options().dtype(tokens.scalar_type()));
  return out.index_add(0, token_of_, weighted.to(out.scalar_type()));
}

}  // namespace fsdpp::moe
