#include "fsdpp/moe/permute.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp::moe {

ExpertMajorOrder expert_major_order(const at::Tensor& counts, int64_t experts_per_rank,
                                    const at::Device& device) {
  FSDPP_CHECK_AS(ConfigError, experts_per_rank > 0 && counts.dim() == 1 &&
                                  counts.numel() % experts_per_rank == 0,
                 "[moe] expert_major_order: {} counts for {} experts per rank; expected a 1-D "
                 "tensor of ranks * experts_per_rank counts",
                 counts.numel(), experts_per_rank);
  const auto host = counts.to(at::kCPU, at::kLong).contiguous();
  const int64_t* c = host.data_ptr<int64_t>();
  const int64_t ranks = host.numel() / experts_per_rank;
  // Where each (rank, expert) block starts in the rank-major rows received.
  std::vector<int64_t> start(host.numel());
  int64_t total = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    FSDPP_CHECK_AS(ConfigError, c[i] >= 0, "[moe] expert_major_order: count {} at {} is negative",
                   c[i], i);
    start[i] = total;
    total += c[i];
  }
  ExpertMajorOrder out;
  out.tokens_per_expert.assign(experts_per_rank, 0);
  auto indices = at::empty({total}, at::kLong);
  int64_t* idx = indices.data_ptr<int64_t>();
  int64_t k = 0;
  for (int64_t e = 0; e < experts_per_rank; ++e) {
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t b = r * experts_per_rank + e;
      for (int64_t i = 0; i < c[b]; ++i) idx[k++] = start[b] + i;
      out.tokens_per_expert[e] += c[b];
    }
  }
  auto inverse = at::empty({total}, at::kLong);
  int64_t* inv = inverse.data_ptr<int64_t>();
  for (int64_t i = 0; i < total; ++i) inv[idx[i]] = i;
  out.indices = indices.to(device);
  out.inverse = inverse.to(device);
  return out;
}

}  // namespace fsdpp::moe
