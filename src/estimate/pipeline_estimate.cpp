#include "pipeline_estimate.h"

#include <algorithm>
#include <map>

#include "estimated_optimizer.h"
#include "pipeline_stages.h"
#include "teacher_activations.h"
#include "fsdpp/common/error.h"
#include "fsdpp/pipeline/action.h"

namespace fsdpp::estimate_detail {
namespace {

// A distillation teacher (docs/estimate.md#a-teacher-under-a-pipeline): FULL_SHARD over the
// world, its shards kept; before the pipeline every rank runs it on the step's rows (the
// student's stages resharded then), and the last stage's ranks keep its logits until their
// last microbatch's backward (its rows are views of them), the others drop them at once.
struct TeacherCosts {
  int64_t held = 0, forward_peak = 0, logits = 0;
};
TeacherCosts teacher_costs(const EstimateOptions& o) {
  TeacherCosts c;
  if (!o.teacher) return c;
  const TeacherPlan plan_t = plan_teacher(*o.teacher, o.world_size, o.forward_prefetch);
  Ledger t({true, true, true, true, true, true, true}, nullptr);
  build_teacher(t, plan_t, /*deferred=*/true, o.init_chunk_bytes);
  c.held = t.live();
  t.reset_peak();
  teacher_forward(t, plan_t, o.batch, o.seq_len);
  c.forward_peak = t.peak();
  c.logits = t.live() - c.held;
  return c;
}

// What a pp rank holds of its stages for the whole step.
struct RankStages {
  int64_t shards = 0, buffers = 0, numel = 0, largest_gather = 0, largest_shard_param = 0, gathered_numel = 0,
          grad_shards = 0;
};
RankStages sum_stages(const std::vector<StagePlan>& plan, const std::vector<int>& mine) {
  RankStages r;
  for (int s : mine) {
    const auto& st = plan[static_cast<size_t>(s)];
    r.shards += st.shard;
    r.buffers += st.buffers;
    r.numel += st.numel;
    r.gathered_numel += st.gathered;
    r.grad_shards += st.grad_shards;
    r.largest_gather = std::max(r.largest_gather, st.largest_gather);
    r.largest_shard_param = std::max(r.largest_shard_param, st.largest_param);
  }
  return r;
}

// One pp rank's step replayed action by action: the highest moment and what made it up.
class RankReplay {
 public:
  RankReplay(const EstimateOptions& o, const pipeline::PipelineSchedule& sched, const std::vector<StagePlan>& plan,
             std::vector<MemoryEstimate::Stage>& stages, const TeacherCosts& teacher, const Dims& d, int r)
      : o_(o), sched_(sched), plan_(plan), stages_(stages), teacher_(teacher), d_(d), r_(r),
        actions_(sched.actions[static_cast<size_t>(r)]), mine_(sched.stages_of(r)), sums_(sum_stages(plan, mine_)),
        optimizer_(estimated_optimizer(o.optimizer)), pb_(dtype_bytes(o.param_dtype)) {
    // Persistent: fp32 shards (or replicas), buffers, the optimizer's state (steady state).
    params_ = sums_.shards * f32 + sums_.buffers;
    optim_state_ = o.optimizer_state_on_disk ? 0 : optimizer_.states() * sums_.shards * f32;
    gathered_ = sums_.gathered_numel * pb_ + (pb_ != f32 ? (sums_.numel - sums_.gathered_numel) * pb_ : 0);
  }

  MemoryEstimate run();
  const std::vector<int>& mine() const { return mine_; }
  const RankStages& held() const { return sums_; }
  int64_t optimizer_state() const { return optim_state_; }

 private:
  static constexpr int64_t f32 = 4;
  void consider(int64_t grads, int64_t unsharded, int64_t acts, int64_t extra_optim, std::string where);
  size_t last_backward_of_last_stage() const;
  void post_recvs();
  void replay(const pipeline::Action& a);
  void backward(const pipeline::Action& a, const StagePlan& st, const std::string& at);
  void weight_backward(const pipeline::Action& a, const StagePlan& st, const std::string& at);
  void end_of_step();
  MemoryEstimate estimate() const;
  void grads_appear(int s);

  const EstimateOptions& o_;
  const pipeline::PipelineSchedule& sched_;
  const std::vector<StagePlan>& plan_;
  std::vector<MemoryEstimate::Stage>& stages_;
  const TeacherCosts& teacher_;
  const Dims& d_;
  const int r_;
  const std::vector<pipeline::Action>& actions_;
  const std::vector<int> mine_;
  const RankStages sums_;
  const EstimatedOptimizer optimizer_;
  const int64_t pb_;
  int64_t params_ = 0, optim_state_ = 0, gathered_ = 0;
  struct Peak {
    int64_t total = -1, grads = 0, unsharded = 0, acts = 0, optim = 0, teacher = 0;
    std::string where;
  } peak_;
  int64_t teacher_now_ = 0;  // the teacher's bytes at the moment considered
  int64_t pending_ = 0, acts_ = 0, grads_ = 0;
  std::map<std::pair<int, int>, int> fwd_pending_, bwd_pending_;
  std::map<int, int> in_flight_, held_w_;
  std::map<int, bool> has_grads_;
};

void RankReplay::consider(int64_t grads, int64_t unsharded, int64_t acts, int64_t extra_optim, std::string where) {
  const int64_t t = params_ + optim_state_ + extra_optim + grads + unsharded + acts + teacher_now_;
  if (t > peak_.total)
    peak_ = {t, grads, unsharded, acts, optim_state_ + extra_optim, teacher_now_, std::move(where)};
}

// The last stage's last backward (B or I) on this rank: its teacher logits go after it.
size_t RankReplay::last_backward_of_last_stage() const {
  size_t last = actions_.size();
  for (size_t i = 0; i < actions_.size(); ++i) {
    const auto& a = actions_[i];
    if (a.stage == sched_.num_stages - 1 && pipeline::is_backward(a.kind)) last = i;
  }
  return last;
}

// Posted recvs: every activation and gradient this rank will receive, from the step's start.
void RankReplay::post_recvs() {
  const int64_t msg = d_.e * d_.S * d_.C;
  for (const auto& a : actions_) {
    if (a.kind == pipeline::ActionKind::RECV_F) {
      pending_ += msg;
      fwd_pending_[{a.stage, a.microbatch}] = 1;
    } else if (a.kind == pipeline::ActionKind::RECV_B) {
      pending_ += msg;
      bwd_pending_[{a.stage, a.microbatch}] = 1;
    }
  }
}

// The stage's first backward makes its gradients as it goes (the backward's own temporaries hold
// them, a block at a time); they stay from then on.
void RankReplay::grads_appear(int s) {
  if (has_grads_[s]) return;
  has_grads_[s] = true;
  grads_ += plan_[static_cast<size_t>(s)].numel * pb_;
}

// B or I. The first stage's input needs no gradient: its I does nothing and its W is the whole
// backward (split_backward.h).
void RankReplay::backward(const pipeline::Action& a, const StagePlan& st, const std::string& at) {
  if (bwd_pending_.erase({a.stage, a.microbatch})) pending_ -= d_.e * d_.S * d_.C;  // counted in the backward's own
  if (!(a.kind == pipeline::ActionKind::I && st.embedding))
    consider(grads_, gathered_, pending_ + acts_ + st.bwd_extra, 0, at);
  if (a.kind == pipeline::ActionKind::B) grads_appear(a.stage);
  --in_flight_[a.stage];
  if (a.kind == pipeline::ActionKind::B) {
    acts_ -= st.saved;
  } else {
    if (!st.embedding) acts_ += st.wgrad;
    auto& ms = stages_[static_cast<size_t>(a.stage)];
    ms.held_weight_grads = std::max(ms.held_weight_grads, ++held_w_[a.stage]);
  }
}

void RankReplay::weight_backward(const pipeline::Action& a, const StagePlan& st, const std::string& at) {
  if (st.embedding) {
    consider(grads_, gathered_, pending_ + acts_ + st.bwd_extra, 0, at);
    grads_appear(a.stage);
    acts_ -= st.saved;
  } else {
    grads_appear(a.stage);
    consider(grads_, gathered_, pending_ + acts_ + st.largest_param * pb_, 0, at);
    acts_ -= st.saved + st.wgrad;
  }
  --held_w_[a.stage];
}

void RankReplay::replay(const pipeline::Action& a) {
  const auto& st = plan_[static_cast<size_t>(a.stage)];
  const std::string at = fmt::format("{} of stage {} microbatch {}", pipeline::kind_name(a.kind), a.stage, a.microbatch);
  switch (a.kind) {
    case pipeline::ActionKind::F: {
      if (fwd_pending_.erase({a.stage, a.microbatch})) pending_ -= d_.e * d_.S * d_.C;  // becomes the stage's input
      consider(grads_, gathered_, pending_ + acts_ + st.saved + st.fwd_extra, 0, at);  // its own peak
      acts_ += st.saved;
      auto& ms = stages_[static_cast<size_t>(a.stage)];
      ms.in_flight = std::max(ms.in_flight, ++in_flight_[a.stage]);
      break;
    }
    case pipeline::ActionKind::B:
    case pipeline::ActionKind::I: backward(a, st, at); break;
    case pipeline::ActionKind::W: weight_backward(a, st, at); break;
    default: break;
  }
}

// REDUCE_GRAD: each unit's reduce-scatter input beside its gradients, then the shards; the
// optimizer step with AdamW's two temporaries of the largest shard.
void RankReplay::end_of_step() {
  teacher_now_ = teacher_.held;
  const int64_t rb = dtype_bytes(o_.reduce_dtype);
  consider(grads_, gathered_, 0, 0, "reduce-scatter of the gradients");
  consider(sums_.grad_shards + sums_.largest_gather * rb, 0, 0, 0, "reduce-scatter of the gradients");
  const int64_t mapped = o_.optimizer_state_on_disk ? optimizer_.states() * sums_.largest_shard_param * f32 : 0;
  consider(sums_.grad_shards, 0, 0, mapped + (optimizer_.adam() ? 2 * sums_.largest_shard_param * f32 : 0),
           "optimizer step");
}

MemoryEstimate RankReplay::run() {
  teacher_now_ = teacher_.forward_peak;
  if (o_.teacher) {
    consider(0, 0, 0, 0, "teacher forward (no grad) on the step's rows");
    const bool last_stage = std::find(mine_.begin(), mine_.end(), sched_.num_stages - 1) != mine_.end();
    teacher_now_ = teacher_.held + (last_stage ? teacher_.logits : 0);
  }
  const size_t last_backward = last_backward_of_last_stage();
  // The step: UNSHARD of every stage at its first action (the all-gather buffer beside it).
  consider(0, gathered_ + sums_.largest_gather * pb_, 0, 0, "unshard at the step's start");
  post_recvs();
  for (size_t i = 0; i < actions_.size(); ++i) {
    if (i > last_backward) teacher_now_ = teacher_.held;
    replay(actions_[i]);
  }
  end_of_step();
  return estimate();
}

MemoryEstimate RankReplay::estimate() const {
  MemoryEstimate e;
  e.parameters = params_;
  e.gradients = peak_.grads;
  e.optimizer_state = peak_.optim;
  e.unsharded = peak_.unsharded;
  e.activations = peak_.acts;
  e.teacher = peak_.teacher;
  e.tensors = peak_.total;
  e.peak_at = fmt::format("pp rank {}: {}", r_, peak_.where);
  return e;
}

// Building (a model built whole, not deferred): every rank builds the whole model in fp32 (one
// init temporary beside it), then keeps its stages' shards.
int64_t build_whole_bytes(const ModelDescription& model) {
  int64_t whole = 0, largest = 0;
  for (const auto& u : model.units)
    for (const auto& p : u.params) {
      whole += p.numel();
      largest = std::max(largest, p.numel());
    }
  return whole * 4 + largest * 4;
}

void pipeline_notes(MemoryEstimate& best, const EstimateOptions& o, const PipelineLayout& layout,
                    const pipeline::PipelineSchedule& sched, const ModelDescription& model, int64_t teacher_logits) {
  const int degree = o.pipeline.degree, m = o.pipeline.microbatches, tp = o.tensor_parallel, ep = o.expert_parallel;
  best.notes.push_back(fmt::format(
      "pipeline {} x {} microbatches of {} sequences, schedule {} ({} stage(s) per rank), FSDP over {} rank(s) per "
      "stage; parameters gathered and gradients unsharded for the whole step; the estimate is pp rank {}'s",
      degree, m, o.batch / m, sched.name, sched.num_stages / degree, layout.shard_world, best.pipeline_stage >= 0
          ? sched.rank_of(best.pipeline_stage) : 0));
  const bool experts_apart = layout.local.units.size() > model.units.size();
  if (tp > 1 || experts_apart)
    best.notes.push_back(fmt::format(
        "pipeline stages of the rank's slices: tp {}{}{}", tp,
        tp > 1 ? (layout.split_experts && !(ep > 1) ? ", experts split over tp" : ", experts whole") : "",
        experts_apart ? fmt::format(", experts units of their own over ep {}, FSDP over efsdp = {} rank(s)", ep,
                                    layout.expert_shard_world)
                      : ""));
  best.notes.push_back("pipeline: the C library's heap is not modelled (allocator 0; set MALLOC_MMAP_THRESHOLD_)");
  if (o.teacher)
    best.notes.push_back(fmt::format(
        "distillation teacher: FULL_SHARD over {} rank(s), run on the step's {} sequences before the pipeline on "
        "every rank; its logits ({:.2f} MiB) held on the last stage's ranks until their last backward, the "
        "objective in place of the cross entropy there",
        o.world_size, o.batch, static_cast<double>(teacher_logits) / (1 << 20)));
}

}  // namespace

MemoryEstimate estimate_pipeline(const ModelDescription& model, const EstimateOptions& o) {
  const PipelineLayout layout = pipeline_layout(model, o);
  const auto& sh = *model.shape;
  const StageCut cut = cut_stages(sh, o);
  const auto& sched = cut.schedule;
  const Dims d = decoder_dims(sh, o, o.batch / o.pipeline.microbatches);
  const MoeDims md = moe_dims(sh, o.tensor_parallel, o.expert_parallel, layout.split_experts, o.sequence_parallel);
  const std::vector<StagePlan> plan = plan_stages(sh, o, layout, cut.units_per_stage, DecoderLayers{&sh, &d, &md});
  const int64_t build_total = build_whole_bytes(model);
  const TeacherCosts teacher = teacher_costs(o);

  MemoryEstimate best;
  best.total = -1;
  std::vector<MemoryEstimate::Stage> stages(plan.size());
  for (int r = 0; r < o.pipeline.degree; ++r) {
    RankReplay replay(o, sched, plan, stages, teacher, d, r);
    MemoryEstimate e = replay.run();
    if (!o.deferred_init && build_total > e.tensors) {
      e = MemoryEstimate{};
      e.parameters = e.tensors = build_total;
      e.peak_at = fmt::format("pp rank {}: building the model", r);
    }
    const auto& mine = replay.mine();
    const RankStages& sums = replay.held();
    const int64_t optim_state = replay.optimizer_state();
    e.runtime = o.runtime_baseline_bytes;
    e.total = e.tensors + e.runtime;
    e.shard_world = layout.shard_world;
    e.expert_shard_world = layout.expert_shard_world;
    e.model_states = sums.shards * 4 * 2 + optim_state;
    e.held = {sums.shards * 4, sums.grad_shards, optim_state};
    e.pipeline_stage = mine.front();
    for (int s : mine) {
      auto& ms = stages[static_cast<size_t>(s)];
      ms.stage = s;
      ms.rank = r;
      ms.total = e.total;
      ms.tensors = e.tensors;
      ms.peak_at = e.peak_at;
      for (auto& name : stage_unit_names(plan[static_cast<size_t>(s)], sh.n_layers + 2)) ms.units.push_back(name);
    }
    const bool wanted = o.pipeline.stage >= 0 ? std::find(mine.begin(), mine.end(), o.pipeline.stage) != mine.end()
                                              : e.total > best.total;
    if (wanted) best = e;
  }
  FSDPP_CHECK_AS(ConfigError, best.total >= 0, "[estimate] pipeline: stage {} is not one of the {} stages",
                 o.pipeline.stage, plan.size());
  best.stages = stages;
  pipeline_notes(best, o, layout, sched, model, teacher.logits);
  return best;
}

}  // namespace fsdpp::estimate_detail
