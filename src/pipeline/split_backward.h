#pragma once
// Backward split into its input half (I) and its weight half (W), for zero-bubble schedules.
//
// I runs autograd from the stage's output to its input only, keeping the graph. Autograd then
// skips the weight-gradient half of every op (an op computes only the outputs someone needs), so
// I costs about half a full backward. What W needs is the gradient arriving at the nodes where
// a weight's path leaves the input's path (the node of `x @ W^T`, of `h * weight`, ...): I
// captures those with a pre-hook on each such node, and W re-runs only those nodes towards the
// weights, with the autograd engine accumulating into .grad as a full backward would. This is
// torch.distributed.pipelining's stage_backward_input / stage_backward_weight, in C++.
//
// A weight reached from one of those nodes both directly and through the input's path (a weight
// used twice, once before and once after another use of the input) cannot be split that way;
// then W runs the backward from the output again, restricted to the weights (correct, but it
// repeats I's work), and weight_split() says so.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace fsdpp::pipeline::detail {

class SplitBackward {
 public:
  // output: what backward starts from; grad: its gradient; input: the stage's input (a leaf
  // that requires grad, or undefined / not requiring grad for the first stage: then I does
  // nothing and W is the whole backward); params: the stage's trainable parameters.
  SplitBackward(at::Tensor output, at::Tensor grad, at::Tensor input, std::vector<at::Tensor> params);
  ~SplitBackward();

  // The input gradient (undefined without an input).
  at::Tensor backward_input();
  // Accumulates the weight gradients into the parameters' .grad and frees the graph.
  void backward_weight();
  bool weight_split() const { return split_; }

 private:
  struct Capture;
  at::Tensor output_, grad_, input_;
  std::vector<at::Tensor> params_;
  std::vector<std::shared_ptr<Capture>> captures_;
  bool split_ = false;
  bool input_done_ = false;
};

}  // namespace fsdpp::pipeline::detail
