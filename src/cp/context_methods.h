#pragma once
// The two methods behind context_attention (context_attention.h), each an autograd Function in
// its own file; context_attention.cpp checks the arguments and picks one.

#include <ATen/Tensor.h>

#include <string>

#include "fsdpp/cp/context_attention.h"

namespace fsdpp::cp::detail {

// K and V all-gathered, the local queries against every key; dk and dv reduce-scattered back.
at::Tensor allgather_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const GroupPtr& group, const std::string& what);

// K and V passed round the ring, partial outputs merged by log-sum-exp; in backward the blocks
// go round again with their dk and dv accumulators, which one more hop brings home.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const GroupPtr& group, const std::string& what);

}  // namespace fsdpp::cp::detail
