#pragma once
// Private to src/fsdp: the backward of a bias-free y = x W^T as at::linear's autograd computes
// it (matmul's fold of x to rows, then mm's two products), for the autograd functions that stand
// in for a linear whose product they do not compute (checkpoint_tail.cpp, kept_linear.cpp): the
// gradients are bit-equal to the linear's.
#include <ATen/ATen.h>

#include <array>

namespace fsdpp::detail {

// {dx, dW} for y = x W^T given dy; an undefined tensor where not needed.
inline std::array<at::Tensor, 2> linear_backward(const at::Tensor& dy, const at::Tensor& x,
                                                 const at::Tensor& weight, bool need_x,
                                                 bool need_weight) {
  const auto g = dy.reshape({-1, dy.size(-1)});
  at::Tensor gx, gw;
  if (need_x) gx = g.mm(weight).view(x.sizes());
  if (need_weight) gw = g.t().mm(x.reshape({-1, x.size(-1)}));
  return {gx, gw};
}

}  // namespace fsdpp::detail
