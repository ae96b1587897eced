// One rank's training step without pipeline parallelism. See step_ledger.h.
#include "step_ledger.h"

namespace fsdpp::estimate_detail {
namespace {

MoeDims moe_of(const DataParallelLayout& a, const EstimateOptions& o) {
  const auto& shape = a.model.shape;
  if (!shape || !shape->qk_norm) return MoeDims{};
  return moe_dims(*shape, a.tp, a.ep, a.split_experts, o.sequence_parallel);
}

}  // namespace

StepLedger::StepLedger(Ledger& l, const EstimateOptions& o, const DataParallelLayout& a, FsdpUnits& units,
                       std::vector<UnitState>& us, const TeacherPlan* teacher)
    : l_(l),
      o_(o),
      a_(a),
      units_(units),
      us_(us),
      teacher_(teacher),
      order_(unit_order(a.model)),
      optimizer_(estimated_optimizer(o.optimizer)),
      param_shards_(optimizer_order_shards(a)),
      have_shape_(a.model.shape.has_value()),
      qwen3_(have_shape_ && a.model.shape->qk_norm),
      md_(moe_of(a, o)),
      d_(have_shape_ ? decoder_dims(*a.model.shape, o, o.batch) : Dims{}),
      layers_(have_shape_ ? std::optional<DecoderLayers>(DecoderLayers{&*a.model.shape, &d_, &md_}) : std::nullopt) {}

void StepLedger::run(bool first) {
  fwd_prefetch_ = first ? 0 : o_.forward_prefetch;
  bwd_prefetch_ = first ? 0 : o_.backward_prefetch;
  pre_ = bwd_prefetch_ > 0 && !o_.backward_prefetch_post;
  post_ = bwd_prefetch_ > 0 && o_.backward_prefetch_post;
  units_.start_step();
  forward();
  loss_backward();
  layers_backward();
  embeddings_backward();
  optimizer_step(first);
}

void StepLedger::forward() {
  l_.at("forward");
  inputs_.clear();
  if (have_shape_) inputs_ = {l_.alloc(kActs, 8 * d_.BT), l_.alloc(kActs, 8 * d_.BT)};  // tokens, targets
  units_.unshard(0);  // the root: embeddings, final norm, output
  units_.prefetch(order_.forward, 0, fwd_prefetch_);
  x_ = have_shape_ ? embedding_forward(l_, d_) : -1;
  saved_.assign(us_.size(), BlockSaved{});
  router_logits_.clear();
  rope_tables_ = qwen3_ ? layers_->rope_tables(l_) : -1;
  layers_forward();
  head_forward();
}

ExpertUnitHooks StepLedger::forward_hooks(int xu) const {
  return {[this, xu] {
            if (xu < 0) return;
            units_.unshard(xu);
            units_.prefetch(order_.forward, xu, fwd_prefetch_);
          },
          [this, xu] {
            if (xu >= 0 && a_.traits->reshard_after_forward) units_.reshard(xu);
          },
          {},
          {}};
}

void StepLedger::layers_forward() {
  for (size_t b = 0; b < order_.blocks.size(); ++b) {
    const size_t i = order_.blocks[b].unit;
    l_.at("forward of " + a_.model.units[i].name);
    units_.unshard(i);
    units_.prefetch(order_.forward, i, fwd_prefetch_);
    if (have_shape_) {
      saved_[i] = layers_->forward(l_, b, x_, router_logits_, forward_hooks(order_.blocks[b].experts));
      x_ = saved_[i].out;
      if (o_.activation_checkpointing) drop_for_checkpointing(l_, saved_[i]);  // only the layer's input stays
    }
    if (a_.traits->reshard_after_forward) units_.reshard(i);
  }
}

// Head: final norm, logits, cross entropy (log_softmax saves its fp32 output); with a teacher
// (fsdpp-train's Teacher::loss) its forward on the same tokens, while the student's activations
// wait for backward, then the objective on both logits.
void StepLedger::head_forward() {
  l_.at("forward of the output layer and loss");
  lb_saved_.clear();
  if (qwen3_ && a_.model.shape->moe)
    lb_saved_ = load_balancing_forward(l_, d_, md_, a_.model.shape->moe->num_sparse());
  head_.clear();
  logits_ = lsm_ = -1;
  if (have_shape_) {
    logits_ = logits_forward(l_, d_, head_);
    Id flat = d_.mp ? l_.alloc(kActs, 4 * d_.BT * d_.V) : -1;
    lsm_ = cross_entropy_forward(l_, d_);
    l_.free(flat);
  }
  if (a_.traits->reshard_after_forward) units_.reshard(0);
  kd_saved_.clear();
  if (teacher_ && have_shape_) {
    const Id tl = teacher_forward(l_, *teacher_, o_.batch, o_.seq_len);
    kd_saved_ = distill_loss_forward(l_, d_.BT, d_.V, d_.e, teacher_->compute_bytes, tl);
  }
}

// The root's outputs were the logits and the loss, and autograd materialised the logits'
// missing gradient as zeros. Parallelized::one_stage_loss now takes the loss of the logits
// outside the model, so these zeros over-estimate by one logits-sized tensor at this phase;
// they are kept until the figures docs/estimate.md quotes are measured again without them.
Id StepLedger::loss_gradient() {
  for (Id id : lb_saved_) l_.free(id);  // the load-balancing loss's backward (small)
  if (!kd_saved_.empty()) {
    // The objective's backward gives the logits their gradient; the student's own loss (its
    // log_softmax) is not backwarded and stays with the output until the step ends.
    Id g = distill_loss_backward(l_, d_.BT, d_.V, kd_saved_);
    if (d_.mp) {
      Id ge = l_.alloc(kActs, d_.e * d_.BT * d_.V);
      l_.free(g);
      g = ge;
    }
    l_.at("backward of the loss and output layer");
    return g;
  }
  const Id zeros = l_.alloc(kActs, d_.e * d_.BT * d_.V);
  Id g2 = cross_entropy_backward(l_, d_, lsm_);
  if (d_.mp) {
    Id g2e = l_.alloc(kActs, d_.e * d_.BT * d_.V);
    l_.free(g2);
    g2 = g2e;
  }
  l_.free(g2);  // added into `zeros` in place
  return zeros;
}

void StepLedger::loss_backward() {
  l_.at("backward of the loss and output layer");
  units_.unshard(0);  // pre-backward of the root (its outputs are the logits and the loss)
  if (pre_) units_.prefetch(order_.backward, 0, bwd_prefetch_);
  const GradAlloc root_grad{&l_, dtype_bytes(o_.param_dtype), &us_[0].grads};
  if (!have_shape_) {
    // Without a shape only the parameters are known: the root's gradients arrive here.
    for (const auto& p : a_.model.units[0].params) root_grad(p.numel());
    return;
  }
  const Id g = loss_gradient();
  x_ = head_backward(l_, d_, head_, g, x_, root_grad);  // now the gradient flowing down
}

ExpertUnitHooks StepLedger::backward_hooks(size_t i, int xu) const {
  if (xu < 0) return {{}, {}, [] {}, [] {}};
  return {{},
          {},
          [this, xu] {
            l_.at("backward of " + a_.model.units[xu].name);
            units_.unshard(xu);
            if (pre_) units_.prefetch(order_.backward, order_.backward_pos[xu], bwd_prefetch_);
          },
          [this, i, xu] {
            if (post_) units_.prefetch(order_.backward, order_.backward_pos[xu], bwd_prefetch_);
            units_.reduce(xu);
            units_.reshard(xu);
            l_.at("backward of " + a_.model.units[i].name);
          }};
}

void StepLedger::layer_backward(size_t b) {
  const size_t i = order_.blocks[b].unit;
  const int xu = order_.blocks[b].experts;
  l_.at("backward of " + a_.model.units[i].name);
  const size_t pos = order_.backward_pos[i];
  units_.unshard(i);
  if (pre_) units_.prefetch(order_.backward, pos, bwd_prefetch_);
  const int64_t pb = dtype_bytes(o_.param_dtype);
  const GradAlloc grad{&l_, pb, &us_[i].grads};
  if (have_shape_) {
    const GradAlloc expert_grad{&l_, pb, &us_[xu >= 0 ? static_cast<size_t>(xu) : i].grads};
    if (o_.activation_checkpointing) {  // re-run the layer's forward from its saved input
      const ExpertUnitHooks again{[this, xu] { if (xu >= 0) units_.unshard(xu); }, [] {}, {}, {}};
      saved_[i] = layers_->recompute(l_, b, saved_[i].x, again);
    }
    x_ = layers_->backward(l_, b, saved_[i], x_, grad, expert_grad, backward_hooks(i, xu));
  } else {
    for (const auto& p : a_.model.units[i].params) grad(p.numel());
  }
  if (post_) units_.prefetch(order_.backward, pos, bwd_prefetch_);
  units_.reduce(i);
  units_.reshard(i);
}

void StepLedger::layers_backward() {
  for (size_t b = order_.blocks.size(); b-- > 0;) layer_backward(b);
}

void StepLedger::embeddings_backward() {
  l_.at("backward of the embeddings");
  if (have_shape_) {
    // Dense embedding gradient; a tied embedding's second gradient is added into the first.
    // Vocab-parallel: the gradient gathered along the sequence (SP), then through the mask.
    Id gg = tp_exit_backward(l_, d_, x_);
    Id gmask = a_.tp > 1 ? l_.alloc(kActs, d_.e * d_.BT * d_.C) : -1;
    if (gg != x_) l_.free(gg);
    if (a_.model.shape->tie_embeddings) {
      l_.touch(kGradWork, d_.V * d_.C * d_.e);
    } else {
      const GradAlloc root_grad{&l_, d_.e, &us_[0].grads};
      root_grad(d_.V * d_.C);
    }
    l_.free(gmask);
    l_.free(x_);
  }
  units_.reduce(0);
  units_.reshard(0);
  l_.at("end of backward");
  units_.finish_reduces();
  for (Id id : inputs_) l_.free(id);
  l_.free(rope_tables_);
}

// One parameter at a time: its state the first time (zeros_like), then LibTorch AdamW's two
// temporaries (exp_avg_sq.sqrt(), and that divided by a scalar).
void StepLedger::optimizer_step(bool first) {
  l_.at("optimizer step");
  const int64_t f32 = 4, states = optimizer_.states();
  for (int64_t n : param_shards_) {
    // On disk: this parameter's state mapped in for its update only.
    std::vector<Id> mapped;
    if (first || o_.optimizer_state_on_disk) {
      for (int64_t k = 0; k < states; ++k)
        (o_.optimizer_state_on_disk ? mapped : optim_state_).push_back(l_.alloc(kOptim, n * f32));
    }
    if (optimizer_.adam()) {
      Id t1 = l_.alloc(kOptim, n * f32), t2 = l_.alloc(kOptim, n * f32);
      l_.free(t1);
      l_.free(t2);
    } else {
      l_.touch(kOptim, n * f32);
    }
    for (Id id : mapped) l_.free(id);
  }
  for (auto& u : us_) l_.free(u.grad_shard);  // zero_grad
  l_.free(logits_);  // the caller's output goes out of scope after the step
  l_.free(lsm_);     // with distillation, its loss's graph went with it
  for (Id id : router_logits_) l_.free(id);
}

}  // namespace fsdpp::estimate_detail
