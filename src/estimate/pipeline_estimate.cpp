#include "pipeline_estimate.h"

#include <algorithm>
#include <map>

#include "decoder_activations.h"
#include "qwen3_activations.h"
#include "teacher_activations.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/optim/optimizer_state.h"
#include "fsdpp/parallel/parallel_dims.h"
#include "fsdpp/parallel/pipeline_cut.h"
#include "fsdpp/pipeline/action.h"
#include "fsdpp/pipeline/schedules.h"

namespace fsdpp::estimate_detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One stage: its units (0 the embedding, 1..L the blocks, L+1 the head, as llama_stages.h counts
// them) and what one microbatch costs it.
struct StagePlan {
  int first = 0, count = 0;
  bool embedding = false, head = false;
  int64_t numel = 0, shard = 0, buffers = 0, largest_param = 0, largest_unit_shard = 0;
  int64_t largest_gather = 0;  // elements of the largest unit's all-gather output (its shard world x shard)
  int64_t sparse_layers = 0;   // Qwen3-MoE: the stage's layers whose MLP is the experts
  int64_t gathered = 0;        // elements of the units FSDP gathers (sharded over more than one rank)
  int64_t grad_shards = 0;     // bytes of its gradients after the reduce (fp32 shards, or reduce_dtype replicas)
  int64_t saved = 0;      // a microbatch's tensors from its F to its B (input and output included)
  int64_t fwd_extra = 0;  // above `saved` at the forward's own peak, over what was live before it
  int64_t bwd_extra = 0;  // above `saved` during its backward (received gradient included)
  int64_t wgrad = 0;      // zero-bubble: what I leaves for W beyond `saved` (gradients at the weights' nodes)
};

// A microbatch through the stage's units in a ledger of its own: the forward (the input received,
// or the embedding's output; the blocks' saved tensors; the head's log_softmax, its logits only
// while the loss is made) and the backward (the gradient received, or the loss's; each block's;
// weight gradients as temporaries, since the stage's unsharded gradients are counted once for
// the step). With a distillation teacher (teacher_e > 0: its logits' element bytes) the last
// stage's loss is the distillation objective on this microbatch's rows of the teacher's logits
// (a view of the step's, held apart) in place of the cross entropy.
void measure(StagePlan& s, const DecoderShape& sh, const Dims& d, const MoeDims& md, int64_t teacher_e) {
  Ledger l({true, true, true, true, true, true, true}, nullptr);
  std::vector<Id> keep;
  const bool qwen3 = sh.qk_norm;
  if (s.embedding) keep.push_back(l.alloc(kActs, 8 * d.BT));  // tokens
  if (s.head) keep.push_back(l.alloc(kActs, 8 * d.BT));       // targets
  Id x = -1;
  if (s.embedding && d.tp > 1) {  // vocab-parallel: this rank's rows, masked, then summed over tp
    Id rows = l.alloc(kActs, d.e * d.BT * d.C);
    x = l.alloc(kActs, d.e * d.BT * d.C);
    l.free(rows);
    x = tp_exit(l, d, x);
  } else {
    x = l.alloc(kActs, d.e * d.S * d.C);  // received, or the embedding's output
  }
  std::vector<BlockSaved> saved;
  std::vector<Id> router_logits;  // until the stage's statistics are made from them
  const int blocks_first = std::max(s.first, 1), blocks_end = std::min<int>(s.first + s.count, sh.n_layers + 1);
  auto sparse = [&](int u) { return sh.moe && sh.moe->sparse[static_cast<size_t>(u - 1)]; };
  Id rope = qwen3 && blocks_end > blocks_first ? l.alloc(kActs, 2 * d.T * md.hd * 4) : -1;  // made per forward
  for (int u = blocks_first; u < blocks_end; ++u) {
    if (qwen3) {
      saved.push_back(qwen3_attention_forward(l, d, md, x));
      qwen3_mlp_forward(l, d, md, sparse(u), saved.back(), router_logits, {});
    } else {
      saved.push_back(block_forward(l, d, x));
    }
    x = saved.back().out;
  }
  // The load-balancing statistics of the stage's sparse layers (their softmax saved), carried on.
  if (md.router_logits && s.sparse_layers > 0) {
    for (Id id : load_balancing_forward(l, d, md, s.sparse_layers)) keep.push_back(id);
  }
  for (Id id : router_logits) l.free(id);
  std::vector<Id> head;
  Id logits = -1, lsm = -1;
  std::vector<Id> kd;
  if (s.head) {
    norm_forward(l, d, head);
    const Id gathered = enter_linears(l, d, head, 1);
    logits = l.alloc(kActs, d.e * d.BT * d.V);
    l.free(gathered);
    if (teacher_e > 0) {
      kd = distill_loss_forward(l, d.BT, d.V, d.e, teacher_e, l.alloc(kTeacher, 0));
    } else if (d.tp > 1) {  // tp::vocab_parallel_cross_entropy's shifted logits and their exp
      Id shifted = l.alloc(kActs, 4 * d.BT * d.V), ex = l.alloc(kActs, 4 * d.BT * d.V);
      lsm = l.alloc(kActs, 4 * d.BT * d.V);
      l.free(shifted);
      l.free(ex);
    } else {
      lsm = l.alloc(kActs, 4 * d.BT * d.V);
    }
    // The logits go once the loss is made: the runtime keeps the loss, whose graph holds the
    // log_softmax, not the head's output (the linear saves its input).
    l.free(logits);
  }
  l.free(rope);
  s.saved = l.live();
  s.fwd_extra = l.peak() - s.saved;
  l.reset_peak();
  std::vector<Id> grads;
  const GradAlloc grad{&l, d.e, &grads};
  auto drop_grads = [&] {
    for (Id g : grads) l.free(g);
    grads.clear();
  };
  Id g = -1;
  if (s.head) {
    Id g2 = -1;
    if (!kd.empty()) {
      g2 = distill_loss_backward(l, d.BT, d.V, kd);
    } else {
      const Id g1 = l.alloc(kActs, 4 * d.BT * d.V);
      g2 = l.alloc(kActs, 4 * d.BT * d.V);
      l.free(lsm);
      l.free(g1);
    }
    Id gnf = l.alloc(kActs, d.e * d.BT * d.C);
    grad(d.V * d.C);
    l.free(g2);
    l.free(head.back());
    gnf = tp_enter_backward(l, d, gnf);
    g = norm_backward(l, d, gnf);
    grad(d.C);
    for (Id id : head) l.free(id);
    l.free(x);
    drop_grads();
  } else {
    g = l.alloc(kActs, d.e * d.S * d.C);  // the gradient received from the next stage
  }
  for (size_t i = saved.size(); i-- > 0;) {
    const int u = blocks_first + static_cast<int>(i);
    if (qwen3) {
      Id gh = qwen3_mlp_backward(l, d, md, sparse(u), saved[i], g, grad, grad, {});
      drop_grads();
      g = qwen3_attention_backward(l, d, md, saved[i], gh, grad);
    } else {
      g = block_backward(l, d, saved[i], g, grad);
    }
    drop_grads();
  }
  if (s.embedding) l.touch(kGradWork, d.V * d.C * d.e);  // the dense embedding gradient
  s.bwd_extra = std::max<int64_t>(0, l.peak() - s.saved);
  // What W needs after I: the gradients at the nodes where the weights' paths leave the input's
  // (each linear's output, each norm's weight multiply); the saved tensors stay with the graph.
  // Per block: q, k, v and o, the two norms (Qwen3: q_norm and k_norm too), then the MLP's: a
  // SwiGLU's three linears, or a sparse layer's router and its experts' three on k copies of
  // the rows they compute.
  s.wgrad = 0;
  for (int u = blocks_first; u < blocks_end; ++u) {
    s.wgrad += d.e * d.BT * (d.Q + 2 * d.K + 3 * d.C + (qwen3 ? d.Q + d.K : 0));
    s.wgrad += sparse(u) ? d.e * (md.route_rows(d.BT) * md.E + md.expert_rows(d.BT) * md.k * (2 * md.I + d.C))
                         : d.e * d.BT * (d.C + 2 * d.F);
  }
  if (s.head) s.wgrad += d.e * d.BT * (d.V + d.C);
  if (s.embedding) s.wgrad += d.e * d.BT * d.C;
}

}  // namespace

MemoryEstimate estimate_pipeline(const ModelDescription& model, const EstimateOptions& o) {
  const auto& pp = o.pipeline;
  FSDPP_CHECK_AS(ConfigError, model.shape.has_value(),
                 "[estimate] pipeline parallelism: the stages of a model given by its shape (a Llama or a "
                 "Qwen3-MoE) are modelled; a parameter count is not");
  const auto& sh = *model.shape;
  FSDPP_CHECK_AS(ConfigError, !sh.tie_embeddings,
                 "[estimate] pipeline parallelism with tied embeddings: the table would live on the first and "
                 "the last stage (split_llama refuses it)");
  FSDPP_CHECK_AS(ConfigError, !o.activation_checkpointing && !o.cpu_offload,
                 "[estimate] pipeline parallelism with activation checkpointing or CPU offload is not modelled");
  const int degree = pp.degree, m = pp.microbatches, tp = o.tensor_parallel, ep = o.expert_parallel;
  FSDPP_CHECK_AS(ConfigError, degree >= 1 && o.world_size % degree == 0,
                 "[estimate] pipeline-parallel degree {} does not divide the world size {}", degree, o.world_size);
  FSDPP_CHECK_AS(ConfigError, m >= 1 && o.batch % m == 0,
                 "[estimate] pipeline: batch={} is not divisible into {} microbatches", o.batch, m);
  const StrategyTraits& traits = traits_of(o.strategy);
  FSDPP_CHECK_AS(ConfigError, !traits.keep_unsharded_between_steps,
                 "[estimate] pipeline parallelism with {} is not modelled (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or "
                 "the HYBRID strategies over each stage's data-parallel ranks)", to_string(o.strategy));
  // The mesh parallelize builds: pp outermost, then (dp_replicate x) dp_shard x tp; the experts'
  // FSDP over efsdp = dp_shard x tp / ep (replicated over dp_replicate).
  parallel::ParallelDims dims{.pp = degree, .tp = tp, .ep = ep};
  if (traits.hybrid) {
    const int dp_ranks = o.world_size / (degree * tp);
    // A node's ranks at most, and at most a stage's data-parallel ranks (as fsdpp-train's
    // parallel_dims takes them under a pipeline).
    dims.dp_shard = std::min(o.shard_group_size > 0 ? o.shard_group_size : 8, dp_ranks);
    FSDPP_CHECK_AS(ConfigError, dp_ranks % dims.dp_shard == 0,
                   "[estimate] {} over {} data-parallel ranks per stage: shard groups of {} ranks do not divide them",
                   to_string(o.strategy), dp_ranks, dims.dp_shard);
    dims.dp_replicate = dp_ranks / dims.dp_shard;
  }
  dims = dims.resolved(o.world_size);
  const int dp = dims.dp_shard;
  const int sw = traits.shards ? dp : 1, esw = traits.shards ? dims.efsdp() : 1;
  // This rank's slices and expert units, as parallelize cuts them after tp and ep.
  const bool split_experts = o.split_experts.value_or(ep == 1);
  const ModelDescription local = rank_slice(model, tp, ep, split_experts);

  // Stages: the cut parallelize makes (parallel::cut_pipeline: by layers_per_stage, torchtitan's
  // key, or as even as can be over the schedule's stages); --stages-per-rank picks another number
  // of stages for the looped schedules.
  const int64_t L = sh.n_layers, n_units = L + 2;
  std::vector<int> counts;
  pipeline::PipelineSchedule sched;
  if (pp.stages_per_rank > 0 && pp.layers_per_stage == 0) {
    sched = pipeline::make_schedule(pp.schedule, degree, m, pp.stages_per_rank);
    counts = models::even_units_per_stage(n_units, sched.num_stages);
  } else {
    auto cut = parallel::cut_pipeline({n_units, models::language_model_units(L)}, pp.schedule,
                                      degree, m, pp.layers_per_stage);
    counts = cut.units_per_stage;
    sched = cut.schedule;
  }
  FSDPP_CHECK_AS(ConfigError, static_cast<int>(counts.size()) == sched.num_stages,
                 "[estimate] pipeline: {} stages of units, but schedule {} runs {} stages on {} ranks",
                 counts.size(), pp.schedule, sched.num_stages, degree);

  const int64_t pb = dtype_bytes(o.param_dtype), rb = dtype_bytes(o.reduce_dtype), f32 = 4;
  const int64_t mb = o.batch / m, BT = mb * o.seq_len;
  auto share = [tp](int64_t size) { return (size + tp - 1) / tp; };  // the largest rank's
  Dims d{BT, mb, o.seq_len, sh.dim, sh.n_heads * sh.head_dim() / tp, sh.n_kv_heads * sh.head_dim() / tp,
         share(sh.ffn_hidden), share(sh.vocab_size), sh.n_heads / tp, sh.n_heads / sh.n_kv_heads, pb,
         o.param_dtype != EstimateDType::FP32, o.sequence_parallel ? BT / tp : BT, tp, o.sequence_parallel,
         o.device_is_gpu};
  const MoeDims md = moe_dims(sh, tp, ep, split_experts, o.sequence_parallel);
  const int64_t rope_rows = sh.max_seq_len > 0 ? sh.max_seq_len : o.seq_len;
  // The rank's units by name: a block's layer and, apart, its experts.
  std::map<std::string, const ModelDescription::Unit*> by_name;
  for (const auto& u : local.units) by_name[u.name] = &u;
  std::vector<StagePlan> plan(counts.size());
  int first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    auto& st = plan[s];
    st.first = first;
    st.count = counts[s];
    first += counts[s];
    st.embedding = st.first == 0;
    st.head = st.first + st.count == n_units;
    // The stage's FSDP units with the ranks each is sharded over.
    std::vector<std::pair<std::vector<ModelDescription::Param>, int>> units;
    std::vector<ModelDescription::Param> root;
    const auto& root_params = local.units[0].params;  // embedding, final norm, output
    for (int u = st.first; u < st.first + st.count; ++u) {
      if (u == 0) {
        root.push_back(root_params[0]);
      } else if (u == n_units - 1) {
        root.push_back(root_params[1]);
        root.push_back(root_params[2]);
      } else {
        const std::string name = "layers." + std::to_string(u - 1);
        units.push_back({by_name.at(name)->params, sw});
        if (auto it = by_name.find(name + ".mlp.experts"); it != by_name.end()) units.push_back({it->second->params, esw});
        if (sh.moe && sh.moe->sparse[static_cast<size_t>(u - 1)]) ++st.sparse_layers;
        if (!sh.qk_norm) st.buffers += 2 * rope_rows * (sh.head_dim() / 2) * f32;
      }
    }
    if (!root.empty()) units.push_back({root, sw});
    for (const auto& [params, w] : units) {
      int64_t shard = 0;
      for (const auto& p : params) {
        st.numel += p.numel();
        shard += w > 1 ? ceil_div(p.rows, w) * p.row_numel : p.numel();
        st.largest_param = std::max(st.largest_param, w > 1 ? ceil_div(p.rows, w) * p.row_numel : p.numel());
      }
      st.shard += shard;
      st.largest_unit_shard = std::max(st.largest_unit_shard, shard);
      if (w > 1) {
        st.largest_gather = std::max(st.largest_gather, w * shard);
        for (const auto& p : params) st.gathered += p.numel();
        st.grad_shards += shard * f32;
      } else {
        for (const auto& p : params) st.grad_shards += p.numel() * rb;
      }
    }
    measure(st, sh, d, md, o.teacher ? dtype_bytes(o.teacher->compute.value_or(o.teacher->dtype)) : 0);
  }

  const auto optimizer = [&] {
    switch (o.optimizer) {
      case EstimateOptimizer::SGD: return optim::created_state_names(optim::OptimizerKind::SGD, {}).size();
      case EstimateOptimizer::SGD_MOMENTUM:
        return optim::created_state_names(optim::OptimizerKind::SGD, {.momentum = true}).size();
      default: return optim::created_state_names(optim::OptimizerKind::ADAMW, {}).size();
    }
  }();
  const bool adam = o.optimizer == EstimateOptimizer::ADAMW || o.optimizer == EstimateOptimizer::ADAM;
  int64_t whole = 0, largest = 0;
  for (const auto& u : model.units)
    for (const auto& p : u.params) {
      whole += p.numel();
      largest = std::max(largest, p.numel());
    }

  // A distillation teacher (docs/estimate.md#a-teacher-under-a-pipeline): FULL_SHARD over the
  // world, its shards kept; before the pipeline every rank runs it on the step's rows (the
  // student's stages resharded then), and the last stage's ranks keep its logits until their
  // last microbatch's backward (its rows are views of them), the others drop them at once.
  int64_t teacher_held = 0, teacher_forward_peak = 0, teacher_logits = 0;
  if (o.teacher) {
    const TeacherPlan plan_t = plan_teacher(*o.teacher, o.world_size, o.forward_prefetch);
    Ledger t({true, true, true, true, true, true, true}, nullptr);
    build_teacher(t, plan_t, /*deferred=*/true, o.init_chunk_bytes);
    teacher_held = t.live();
    t.reset_peak();
    teacher_forward(t, plan_t, o.batch, o.seq_len);
    teacher_forward_peak = t.peak();
    teacher_logits = t.live() - teacher_held;
  }

  MemoryEstimate best;
  best.total = -1;
  std::vector<MemoryEstimate::Stage> stages(counts.size());
  std::vector<int64_t> rank_totals(static_cast<size_t>(degree), 0);
  for (int r = 0; r < degree; ++r) {
    const auto mine = sched.stages_of(r);
    int64_t shards = 0, buffers = 0, numel = 0, largest_gather = 0, largest_shard_param = 0, gathered_numel = 0,
            grad_shards = 0;
    for (int s : mine) {
      const auto& st = plan[static_cast<size_t>(s)];
      shards += st.shard;
      buffers += st.buffers;
      numel += st.numel;
      gathered_numel += st.gathered;
      grad_shards += st.grad_shards;
      largest_gather = std::max(largest_gather, st.largest_gather);
      largest_shard_param = std::max(largest_shard_param, st.largest_param);
    }
    // Persistent: fp32 shards (or replicas), buffers, the optimizer's state (steady state).
    const int64_t params = shards * f32 + buffers;
    const int64_t optim_state = o.optimizer_state_on_disk ? 0 : static_cast<int64_t>(optimizer) * shards * f32;
    const int64_t gathered = gathered_numel * pb + (pb != f32 ? (numel - gathered_numel) * pb : 0);
    struct Peak {
      int64_t total = -1, grads = 0, unsharded = 0, acts = 0, optim = 0, teacher = 0;
      std::string where;
    } peak;
    int64_t teacher_now = teacher_forward_peak;  // the teacher's bytes at the moment considered
    auto consider = [&](int64_t grads, int64_t unsharded, int64_t acts, int64_t extra_optim, std::string where) {
      const int64_t t = params + optim_state + extra_optim + grads + unsharded + acts + teacher_now;
      if (t > peak.total)
        peak = {t, grads, unsharded, acts, optim_state + extra_optim, teacher_now, std::move(where)};
    };
    if (o.teacher) {
      consider(0, 0, 0, 0, "teacher forward (no grad) on the step's rows");
      const bool last_stage = std::find(mine.begin(), mine.end(), sched.num_stages - 1) != mine.end();
      teacher_now = teacher_held + (last_stage ? teacher_logits : 0);
    }
    // The last stage's last backward (B or I) on this rank: its teacher logits go after it.
    size_t last_backward = sched.actions[static_cast<size_t>(r)].size();
    for (size_t i = 0; i < sched.actions[static_cast<size_t>(r)].size(); ++i) {
      const auto& a = sched.actions[static_cast<size_t>(r)][i];
      if (a.stage == sched.num_stages - 1 && pipeline::is_backward(a.kind)) last_backward = i;
    }
    // Building (a model built whole, not deferred): every rank builds the whole model in fp32 (one
    // init temporary beside it), then keeps its stages' shards.
    const int64_t build_total = whole * f32 + largest * f32;
    // The step: UNSHARD of every stage at its first action (the all-gather buffer beside it).
    consider(0, gathered + largest_gather * pb, 0, 0, "unshard at the step's start");
    // Posted recvs: every activation and gradient this rank will receive, from the step's start.
    const int64_t msg = d.e * d.S * d.C;
    int64_t pending = 0;
    std::map<std::pair<int, int>, int> fwd_pending, bwd_pending;
    for (const auto& a : sched.actions[static_cast<size_t>(r)]) {
      if (a.kind == pipeline::ActionKind::RECV_F) {
        pending += msg;
        fwd_pending[{a.stage, a.microbatch}] = 1;
      } else if (a.kind == pipeline::ActionKind::RECV_B) {
        pending += msg;
        bwd_pending[{a.stage, a.microbatch}] = 1;
      }
    }
    int64_t acts = 0, grads = 0;
    std::map<int, int> in_flight, held_w;
    std::map<int, bool> has_grads;
    auto grads_appear = [&](int s) {
      if (has_grads[s]) return;
      has_grads[s] = true;
      grads += plan[static_cast<size_t>(s)].numel * pb;
    };
    for (size_t i = 0; i < sched.actions[static_cast<size_t>(r)].size(); ++i) {
      const auto& a = sched.actions[static_cast<size_t>(r)][i];
      if (i > last_backward) teacher_now = teacher_held;
      const auto& st = plan[static_cast<size_t>(a.stage)];
      auto& ms = stages[static_cast<size_t>(a.stage)];
      const std::string at = fmt::format("{} of stage {} microbatch {}", pipeline::kind_name(a.kind), a.stage, a.microbatch);
      switch (a.kind) {
        case pipeline::ActionKind::F:
          if (fwd_pending.erase({a.stage, a.microbatch})) pending -= msg;  // becomes the stage's input
          consider(grads, gathered, pending + acts + st.saved + st.fwd_extra, 0, at);  // its own peak
          acts += st.saved;
          ms.in_flight = std::max(ms.in_flight, ++in_flight[a.stage]);
          break;
        case pipeline::ActionKind::B:
        case pipeline::ActionKind::I:
          if (bwd_pending.erase({a.stage, a.microbatch})) pending -= msg;  // counted in the backward's own
          // The stage's first backward makes its gradients as it goes (the backward's own
          // temporaries hold them, a block at a time); they stay from then on.
          // The first stage's input needs no gradient: its I does nothing and its W is the
          // whole backward (split_backward.h).
          if (!(a.kind == pipeline::ActionKind::I && st.embedding))
            consider(grads, gathered, pending + acts + st.bwd_extra, 0, at);
          if (a.kind == pipeline::ActionKind::B) grads_appear(a.stage);
          --in_flight[a.stage];
          if (a.kind == pipeline::ActionKind::B) {
            acts -= st.saved;
          } else {
            if (!st.embedding) acts += st.wgrad;
            ms.held_weight_grads = std::max(ms.held_weight_grads, ++held_w[a.stage]);
          }
          break;
        case pipeline::ActionKind::W:
          if (st.embedding) {
            consider(grads, gathered, pending + acts + st.bwd_extra, 0, at);
            grads_appear(a.stage);
            acts -= st.saved;
          } else {
            grads_appear(a.stage);
            consider(grads, gathered, pending + acts + st.largest_param * pb, 0, at);
            acts -= st.saved + st.wgrad;
          }
          --held_w[a.stage];
          break;
        default:
          break;
      }
    }
    // REDUCE_GRAD: each unit's reduce-scatter input beside its gradients, then the shards; the
    // optimizer step with AdamW's two temporaries of the largest shard.
    teacher_now = teacher_held;
    consider(grads, gathered, 0, 0, "reduce-scatter of the gradients");
    consider(grad_shards + largest_gather * rb, 0, 0, 0, "reduce-scatter of the gradients");
    const int64_t mapped = o.optimizer_state_on_disk ? static_cast<int64_t>(optimizer) * largest_shard_param * f32 : 0;
    consider(grad_shards, 0, 0, mapped + (adam ? 2 * largest_shard_param * f32 : 0), "optimizer step");
    MemoryEstimate e;
    e.parameters = params;
    e.gradients = peak.grads;
    e.optimizer_state = peak.optim;
    e.unsharded = peak.unsharded;
    e.activations = peak.acts;
    e.teacher = peak.teacher;
    e.tensors = peak.total;
    e.peak_at = fmt::format("pp rank {}: {}", r, peak.where);
    if (!o.deferred_init && build_total > e.tensors) {
      e = MemoryEstimate{};
      e.parameters = e.tensors = build_total;
      e.peak_at = fmt::format("pp rank {}: building the model", r);
    }
    e.runtime = o.runtime_baseline_bytes;
    e.total = e.tensors + e.runtime;
    e.shard_world = sw;
    e.expert_shard_world = esw;
    e.model_states = shards * f32 * 2 + optim_state;
    e.held = {shards * f32, grad_shards, optim_state};
    e.pipeline_stage = mine.front();
    rank_totals[static_cast<size_t>(r)] = e.total;
    for (int s : mine) {
      auto& ms = stages[static_cast<size_t>(s)];
      ms.stage = s;
      ms.rank = r;
      ms.total = e.total;
      ms.tensors = e.tensors;
      ms.peak_at = e.peak_at;
      const auto& st = plan[static_cast<size_t>(s)];
      for (int u = st.first; u < st.first + st.count; ++u)
        ms.units.push_back(u == 0 ? "tok_embeddings" : u == n_units - 1 ? "head" : "layers." + std::to_string(u - 1));
    }
    const bool wanted = pp.stage >= 0 ? std::find(mine.begin(), mine.end(), pp.stage) != mine.end()
                                       : e.total > best.total;
    if (wanted) best = e;
  }
  FSDPP_CHECK_AS(ConfigError, best.total >= 0, "[estimate] pipeline: stage {} is not one of the {} stages",
                 pp.stage, counts.size());
  best.stages = stages;
  best.notes.push_back(fmt::format(
      "pipeline {} x {} microbatches of {} sequences, schedule {} ({} stage(s) per rank), FSDP over {} rank(s) per "
      "stage; parameters gathered and gradients unsharded for the whole step; the estimate is pp rank {}'s",
      degree, m, mb, sched.name, sched.num_stages / degree, sw, best.pipeline_stage >= 0
          ? sched.rank_of(best.pipeline_stage) : 0));
  if (tp > 1 || local.units.size() > model.units.size())
    best.notes.push_back(fmt::format(
        "pipeline stages of the rank's slices: tp {}{}{}", tp, tp > 1 ? (split_experts && !(ep > 1) ? ", experts split over tp" : ", experts whole") : "",
        local.units.size() > model.units.size()
            ? fmt::format(", experts units of their own over ep {}, FSDP over efsdp = {} rank(s)", ep, esw)
            : ""));
  best.notes.push_back("pipeline: the C library's heap is not modelled (allocator 0; set MALLOC_MMAP_THRESHOLD_)");
  if (o.teacher)
    best.notes.push_back(fmt::format(
        "distillation teacher: FULL_SHARD over {} rank(s), run on the step's {} sequences before the pipeline on "
        "every rank; its logits ({:.2f} MiB) held on the last stage's ranks until their last backward, the "
        "objective in place of the cross entropy there",
        o.world_size, o.batch, static_cast<double>(teacher_logits) / (1 << 20)));
  return best;
}

}  // namespace fsdpp::estimate_detail
