// The backward half of FSDPUnit: the autograd hooks that drive it (pre-backward on the unit's
// outputs, post-accumulate-grad on its parameters) and the gradient reduction.

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on a unit's outputs whose backward runs before any of the unit's own backward: the
// pre-backward point (LibTorch has no module backward hooks).
struct PreBackwardFn : public torch::autograd::Function<PreBackwardFn> {
  // The outputs come as a TensorList: autograd treats a std::vector argument as a
  // non-tensor and would leave the result unconnected to the graph.
  static variable_list forward(AutogradContext* ctx, int64_t unit, at::TensorList outputs) {
    ctx->saved_data["unit"] = unit;
    return outputs.vec();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<FSDPUnit*>(ctx->saved_data["unit"].toInt())->pre_backward();
    variable_list out;
    out.reserve(grads.size() + 1);
    out.emplace_back();  // the unit pointer
    for (auto& g : grads) out.push_back(std::move(g));
    return out;
  }
};

// Runs after autograd has accumulated a parameter's gradient: when all of a unit's trainable
// parameters have theirs, the unit reduces them while backward goes on with earlier units.
struct GradReadyHook : public torch::autograd::PostAccumulateGradHook {
  GradReadyHook(FSDPUnit* unit, size_t index) : unit_(unit), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { unit_->on_grad_accumulated(index_); }
  FSDPUnit* unit_;
  size_t index_;
};

// The shard-shaped gradient at `offset` elements into `buffer`'s storage, sharing it without
// being an autograd view, so that optimizer.zero_grad() may detach it in place.
at::Tensor shard_grad_alias(const at::Tensor& buffer, int64_t offset, const FSDPParam& p) {
  auto g = at::empty({0}, buffer.options());
  g.set_(buffer.storage(), buffer.storage_offset() + offset, p.shard.sizes(), p.shard.strides());
  return g;
}

}  // namespace

void FSDPUnit::watch_gradient(size_t index) {
  torch::autograd::impl::set_post_acc_grad_hooks(params_[index]->param,
                                                 std::make_unique<GradReadyHook>(this, index));
}

std::vector<at::Tensor> FSDPUnit::hook_outputs(std::vector<at::Tensor> outputs) {
  std::vector<size_t> idx;
  variable_list hooked;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      idx.push_back(i);
      hooked.push_back(outputs[i]);
    }
  }
  if (hooked.empty()) return outputs;
  auto wrapped = PreBackwardFn::apply(reinterpret_cast<int64_t>(this), at::TensorList(hooked));
  for (size_t j = 0; j < idx.size(); ++j) outputs[idx[j]] = wrapped[j];
  return outputs;
}

void FSDPUnit::pre_backward() {
  FSDPRootState& r = root();
  r.queue_end_backward();
  if (state_ == UnitState::PRE_BACKWARD) return;  // a unit called twice in one forward
  backward_began_ = trace_begin();
  // A second backward through the unit in one step (called twice in the forward, each
  // reaching the loss by its own path): the first one's reduction is added to the shard
  // gradients before its buckets are issued again.
  if (next_bucket_ == buckets_.size()) finish_gradients();
  unshard();
  state_ = UnitState::PRE_BACKWARD;
  grads_ready_ = 0;
  for (auto& b : buckets_) b.ready = 0;
  r.record_backward(*this);
  if (options_.backward_prefetch == BackwardPrefetch::BACKWARD_PRE) {
    r.prefetch_after(*this, FSDPRootState::Pass::BACKWARD, options_.backward_prefetch_depth);
  }
}

void FSDPUnit::on_grad_accumulated(size_t index) {
  if (state_ != UnitState::PRE_BACKWARD) return;
  ++buckets_[bucket_of_[index]].ready;
  if (++grads_ready_ == num_trainable_) {
    post_backward();
  } else if (buckets_.size() > 1) {
    issue_ready_buckets();
  }
}

void FSDPUnit::issue_ready_buckets() {
  if (held_ || !root().requires_gradient_sync() || gradients_pass_through()) return;
  // In bucket order whatever order the gradients came in, so that every rank issues the same
  // collectives in the same order.
  while (next_bucket_ + 1 < buckets_.size() &&
         buckets_[next_bucket_].ready == buckets_[next_bucket_].trainable) {
    issue_bucket(next_bucket_++);
  }
}

void FSDPUnit::post_backward() {
  state_ = UnitState::IDLE;
  FSDPRootState& r = root();
  // Before this unit's reduce-scatter, so the next gather does not queue behind it; not from
  // the end-of-backward callback, when no unit's backward is left to run.
  if (options_.backward_prefetch == BackwardPrefetch::BACKWARD_POST && r.end_backward_queued()) {
    r.prefetch_after(*this, FSDPRootState::Pass::BACKWARD, options_.backward_prefetch_depth);
  }
  reduce_gradients();
  reshard(!keep_unsharded_between_steps());
  trace_end("backward", backward_began_);
}

void FSDPUnit::reduce_gradients() {
  if (held_ || !root().requires_gradient_sync()) return;
  issue_reduce();
}

void FSDPUnit::reduce_held_gradients() {
  FSDPP_CHECK(held_, "[fsdp] reduce_gradients: unit '{}' is not held; call fsdpp::unshard(root) "
              "before the step's first forward", name_);
  finish_gradients();  // a reduction still in flight adds to the shard first
  // As backward leaves a unit whose backward never ran (no output reached the loss) without
  // gradients, rather than with zeros that weight decay would act on. Every rank ran the same
  // graph, so they agree on which units reduce.
  for (const auto& p : params_) {
    if (p->requires_grad && p->param.grad().defined()) {
      issue_reduce();
      return;
    }
  }
}

// Every bucket not yet issued. A bucket is one flat reduce-scatter: row k of its
// (shard_world, bucket columns) input holds, parameter by parameter, the part of each gradient
// that rank k's shard covers (zeros where the shard is padding), and the sum lands in the
// bucket's columns of the unit's reduced shard. Divided once in finish_gradients().
void FSDPUnit::issue_reduce() {
  if (num_trainable_ == 0) return;
  at::NoGradGuard no_grad;
  if (gradients_pass_through()) {
    pass_gradients_through();
    return;
  }
  while (next_bucket_ < buckets_.size()) issue_bucket(next_bucket_++);
}

void FSDPUnit::issue_bucket(size_t index) {
  at::NoGradGuard no_grad;
  FSDPCommContext& comm = root().comm(compute_device_);
  comm.before_reduce();  // GPU: the previous reduce-scatter done on the compute stream
  const ReduceBucket& b = buckets_[index];
  const auto options =
      flat_shard_.options().dtype(reduce_dtype_).device(compute_device_).pinned_memory(false);
  if (!pending_) pending_.emplace().output = at::empty({total_shard_numel_}, options);
  PendingReduce& pending = *pending_;
  auto out = pending.output.narrow(0, b.begin, b.numel);
  // Every column is written below (gradient or zeros), so no separate zero-fill pass. Without
  // a shard group the bucket's input is its place in the output.
  auto input = shard_group_ ? at::empty({shard_world_, b.numel}, options) : out.view({1, b.numel});
  for (size_t i = b.first; i < b.end; ++i) {
    auto& p = *params_[i];
    p.copy_in_grad(p.requires_grad ? p.param.grad() : at::Tensor(), input, b.begin);
    if (p.requires_grad) p.param.mutable_grad() = at::Tensor();
  }
  if (predivide_factor_ != 1) input.div_(predivide_factor_);
  if (shard_group_) {
    auto work = shard_group_->reduce_scatter_tensor_async(out, input.view({-1}),
                                                          dist::ReduceOp::SUM, tag());
    comm.reduce_issued(work);
    if (replicate_group_) {
      work.wait();  // the replicas reduce what the shard group produced
    } else {
      pending.works.push_back(std::move(work));
    }
  }
  if (replicate_group_) {
    pending.works.push_back(replicate_group_->all_reduce_async(out, dist::ReduceOp::SUM, tag()));
  }
}

bool FSDPUnit::gradients_pass_through() const {
  return !shard_group_ && !replicate_group_ && !separate_unsharded_ &&
         reduce_dtype_ == flat_shard_.scalar_type() && divide_factor_ == 1 && predivide_factor_ == 1;
}

// With nothing to sum, convert or divide, the reduce-scatter's result would be the gradient
// itself: it becomes the shard's gradient as autograd left it, instead of a copy into a flat
// buffer (at one rank that copy was most of FSDP's overhead over plain LibTorch). A trainable
// parameter that no gradient reached gets zeros, as the flat path's zero-filled columns give.
// The parameters are their shards here, so unlike finish_gradients() no gathered ZERO1 copy
// needs invalidating.
void FSDPUnit::pass_gradients_through() {
  for (auto& p : params_) {
    if (!p->requires_grad) continue;
    auto g = p->param.grad();
    p->param.mutable_grad() = at::Tensor();
    if (!g.defined()) {
      g = at::zeros_like(p->shard);
    } else if (g.sizes() != p->shard.sizes() || !g.is_contiguous()) {
      g = shard_grad_alias(g.contiguous(), 0, *p);  // a 0-dim parameter's shard is (1)
    }
    p->add_shard_grad(std::move(g));
  }
}

void FSDPUnit::finish_gradients() {
  if (!pending_) return;
  auto pending = std::move(*pending_);
  pending_.reset();
  next_bucket_ = 0;
  for (auto& w : pending.works) w.wait();
  // ZERO1 keeps its gathered parameters between steps; the optimizer step that follows
  // synchronised gradients changes the shards (LibTorch's SGD does it through .data(), which
  // the version counter does not see), so the next forward gathers again.
  if (keep_unsharded_between_steps()) gathered_valid_ = false;
  at::NoGradGuard no_grad;
  // The reduced shard comes back in the master dtype, next to the master shard (host memory
  // under CPU offload), and is divided there in full precision.
  auto reduced = pending.output;
  if (reduced.scalar_type() != flat_shard_.scalar_type() || reduced.device() != flat_shard_.device()) {
    reduced = reduced.to(flat_shard_.options().pinned_memory(false));
  }
  if (divide_factor_ != predivide_factor_) reduced.div_(divide_factor_ / predivide_factor_);
  for (auto& p : params_) {
    if (p->requires_grad) p->add_shard_grad(shard_grad_alias(reduced, p->offset, *p));
  }
}

}  // namespace fsdpp
