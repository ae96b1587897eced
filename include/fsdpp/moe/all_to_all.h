#pragma once
// The communication of expert parallelism, each an autograd Function whose backward is the
// reverse collective, so loss.backward() just works across the expert-parallel group:
//
//   all_to_all_rows   forward: rows to every rank (uneven splits)   backward: the reverse
//                     all-to-all of the gradient (the splits swapped)
//   sum_over_ranks    forward: all-reduce SUM                        backward: all-reduce SUM
//
// sum_over_ranks is the adjoint of a sum that every rank then uses in its own loss: rank r's
// contribution reaches every rank's loss, so its gradient is the sum of theirs. With each rank's
// loss averaged over the ranks afterwards (FSDP's gradient average), a term computed from global
// statistics (the load-balancing loss over the whole batch) gets the gradient the single process
// gives it.

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::moe {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

// x (sum(input_splits), ...) -> (sum(output_splits), ...): input_splits[j] rows of x go to rank
// j, in order; output_splits[r] rows come from rank r, in rank order. The splits must agree
// across ranks (output_splits[r] on rank j == input_splits[j] on rank r), which the exchange of
// counts that precedes it ensures (dispatch.h). `what` names the layer in collective errors.
at::Tensor all_to_all_rows(const at::Tensor& x, const GroupPtr& group,
                           std::vector<int64_t> output_splits, std::vector<int64_t> input_splits,
                           const std::string& what = "moe");

// The element-wise sum of x over the group, on every rank.
at::Tensor sum_over_ranks(const at::Tensor& x, const GroupPtr& group,
                          const std::string& what = "moe");

}  // namespace fsdpp::moe
