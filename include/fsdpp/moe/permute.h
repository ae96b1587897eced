#pragma once
// The order of the rows an expert-parallel rank receives. The all-to-all delivers them
// rank-major: first every row rank 0 sent (its rows for local expert 0, then for local expert
// 1, ...), then rank 1's, ...; the experts want them expert-major, each expert's rows together,
// so that one matmul serves them all (torchtitan's generate_permute_indices).
//
//   // 2 source ranks, 2 local experts; rank 0 sent 2 rows for expert 0 and 3 for expert 1,
//   // rank 1 sent 1 and 4:
//   auto o = moe::expert_major_order(torch::tensor({2, 3, 1, 4}), /*experts_per_rank=*/2);
//   o.indices;            // [0, 1, 5, 2, 3, 4, 6, 7, 8, 9]
//   o.tokens_per_expert;  // {3, 7}
//   auto grouped = received.index_select(0, o.indices);   // expert-major
//   auto back = grouped.index_select(0, o.inverse);        // rank-major again
//
// Within an expert, rows keep their source rank's order (rank 0's first), so each expert sees
// its tokens in global batch order, as the single process does.

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

namespace fsdpp::moe {

struct ExpertMajorOrder {
  at::Tensor indices;  // (M) int64: row i of the expert-major layout is row indices[i] received
  at::Tensor inverse;  // (M) int64: row j received is row inverse[j] of the expert-major layout
  std::vector<int64_t> tokens_per_expert;  // (experts_per_rank): rows of each local expert
};

// counts: (ranks * experts_per_rank) integers, counts[r * experts_per_rank + e] the rows source
// rank r sent for local expert e (what the all-to-all of the counts delivers); any device, read
// on the host. The indices are made on `device`. Throws ConfigError on a size that is not a
// multiple of experts_per_rank or a negative count.
ExpertMajorOrder expert_major_order(const at::Tensor& counts, int64_t experts_per_rank,
                                    const at::Device& device = at::kCPU);

}  // namespace fsdpp::moe
