// Pipeline parallelism's stages in the estimate. See pipeline_stages.h.
#include "pipeline_stages.h"

#include <algorithm>
#include <map>

#include "estimate_layout.h"
#include "teacher_activations.h"
#include "fsdpp/common/error.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/parallel/pipeline_cut.h"
#include "fsdpp/pipeline/schedules.h"

namespace fsdpp::estimate_detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The checks a pipelined run makes before its degrees.
void check_pipeline(const ModelDescription& model, const EstimateOptions& o) {
  FSDPP_CHECK_AS(ConfigError, model.shape.has_value(),
                 "[estimate] pipeline parallelism: the stages of a model given by its shape (a Llama or a "
                 "Qwen3-MoE) are modelled; a parameter count is not");
  FSDPP_CHECK_AS(ConfigError, !model.shape->tie_embeddings,
                 "[estimate] pipeline parallelism with tied embeddings: the table would live on the first and "
                 "the last stage (split_llama refuses it)");
  FSDPP_CHECK_AS(ConfigError, !o.activation_checkpointing && !o.cpu_offload,
                 "[estimate] pipeline parallelism with activation checkpointing or CPU offload is not modelled");
  const int degree = o.pipeline.degree, m = o.pipeline.microbatches;
  FSDPP_CHECK_AS(ConfigError, degree >= 1 && o.world_size % degree == 0,
                 "[estimate] pipeline-parallel degree {} does not divide the world size {}", degree, o.world_size);
  FSDPP_CHECK_AS(ConfigError, m >= 1 && o.batch % m == 0,
                 "[estimate] pipeline: batch={} is not divisible into {} microbatches", o.batch, m);
  FSDPP_CHECK_AS(ConfigError, !traits_of(o.strategy).keep_unsharded_between_steps,
                 "[estimate] pipeline parallelism with {} is not modelled (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or "
                 "the HYBRID strategies over each stage's data-parallel ranks)", to_string(o.strategy));
}

// A stage's FSDP units with the ranks each is sharded over, and its buffers and sparse layers.
struct StageUnits {
  std::vector<std::pair<std::vector<ModelDescription::Param>, int>> units;
};
StageUnits stage_units(StagePlan& st, const DecoderShape& sh, const EstimateOptions& o, const PipelineLayout& layout,
                       const std::map<std::string, const ModelDescription::Unit*>& by_name) {
  const int64_t n_units = sh.n_layers + 2, f32 = 4;
  const int64_t rope_rows = sh.max_seq_len > 0 ? sh.max_seq_len : o.seq_len;
  const int sw = layout.shard_world;
  StageUnits out;
  std::vector<ModelDescription::Param> root;
  const auto& root_params = layout.local.units[0].params;  // embedding, final norm, output
  for (int u = st.first; u < st.first + st.count; ++u) {
    if (u == 0) {
      root.push_back(root_params[0]);
    } else if (u == n_units - 1) {
      root.push_back(root_params[1]);
      root.push_back(root_params[2]);
    } else {
      const std::string name = "layers." + std::to_string(u - 1);
      out.units.push_back({by_name.at(name)->params, sw});
      if (auto it = by_name.find(name + ".mlp.experts"); it != by_name.end())
        out.units.push_back({it->second->params, layout.expert_shard_world});
      if (sh.moe && sh.moe->sparse[static_cast<size_t>(u - 1)]) ++st.sparse_layers;
      if (!sh.qk_norm) st.buffers += 2 * rope_rows * (sh.head_dim() / 2) * f32;
    }
  }
  if (!root.empty()) out.units.push_back({root, sw});
  return out;
}

// The stage's shards, gathers and gradient shards from its units.
void add_shards(StagePlan& st, const StageUnits& su, int64_t reduce_bytes) {
  const int64_t f32 = 4;
  for (const auto& [params, w] : su.units) {
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
      for (const auto& p : params) st.grad_shards += p.numel() * reduce_bytes;
    }
  }
}

// A microbatch's forward through the stage in its own ledger: the input received, or the
// embedding's output; the blocks' saved tensors; the head's log_softmax, its logits only while
// the loss is made. With a distillation teacher (teacher_e > 0: its logits' element bytes) the
// loss is the objective on this microbatch's rows of the teacher's logits (a view of the step's,
// held apart). Leaves what backward needs in `saved`, `head`, `lsm` and `kd`.
struct MicrobatchForward {
  std::vector<BlockSaved> saved;
  std::vector<Id> head, kd;
  Id x = -1, lsm = -1;
};
MicrobatchForward measure_forward(Ledger& l, StagePlan& s, const DecoderLayers& layers, int blocks_first,
                                  int blocks_end, int64_t teacher_e) {
  const Dims& d = *layers.d;
  MicrobatchForward f;
  if (s.embedding) l.alloc(kActs, 8 * d.BT);  // tokens
  if (s.head) l.alloc(kActs, 8 * d.BT);       // targets
  f.x = s.embedding ? embedding_forward(l, d) : l.alloc(kActs, d.e * d.S * d.C);  // or received
  std::vector<Id> router_logits;  // until the stage's statistics are made from them
  Id rope = blocks_end > blocks_first ? layers.rope_tables(l) : -1;  // made per forward
  for (int u = blocks_first; u < blocks_end; ++u) {
    f.saved.push_back(layers.forward(l, static_cast<size_t>(u - 1), f.x, router_logits, {}));
    f.x = f.saved.back().out;
  }
  // The load-balancing statistics of the stage's sparse layers (their softmax saved), carried on.
  if (layers.md->router_logits && s.sparse_layers > 0) load_balancing_forward(l, d, *layers.md, s.sparse_layers);
  for (Id id : router_logits) l.free(id);
  if (s.head) {
    const Id logits = logits_forward(l, d, f.head);
    if (teacher_e > 0) {
      f.kd = distill_loss_forward(l, d.BT, d.V, d.e, teacher_e, l.alloc(kTeacher, 0));
    } else {
      f.lsm = cross_entropy_forward(l, d);
    }
    // The logits go once the loss is made: the runtime keeps the loss, whose graph holds the
    // log_softmax, not the head's output (the linear saves its input).
    l.free(logits);
  }
  l.free(rope);
  return f;
}

// Its backward: the gradient received, or the loss's; each block's; weight gradients as
// temporaries, since the stage's unsharded gradients are counted once for the step.
void measure_backward(Ledger& l, StagePlan& s, const DecoderLayers& layers, int blocks_first, MicrobatchForward& f) {
  const Dims& d = *layers.d;
  std::vector<Id> grads;
  const GradAlloc grad{&l, d.e, &grads};
  auto drop_grads = [&] {
    for (Id g : grads) l.free(g);
    grads.clear();
  };
  Id g = -1;
  if (s.head) {
    const Id g2 = !f.kd.empty() ? distill_loss_backward(l, d.BT, d.V, f.kd) : cross_entropy_backward(l, d, f.lsm);
    g = head_backward(l, d, f.head, g2, f.x, grad);
    drop_grads();
  } else {
    g = l.alloc(kActs, d.e * d.S * d.C);  // the gradient received from the next stage
  }
  for (size_t i = f.saved.size(); i-- > 0;) {
    const auto layer = static_cast<size_t>(blocks_first - 1) + i;
    g = layers.backward(l, layer, f.saved[i], g, grad, grad, {}, drop_grads);
    drop_grads();
  }
  if (s.embedding) l.touch(kGradWork, d.V * d.C * d.e);  // the dense embedding gradient
}

// What W needs after I: the gradients at the nodes where the weights' paths leave the input's
// (each linear's output, each norm's weight multiply); the saved tensors stay with the graph.
// Per block: q, k, v and o, the two norms (Qwen3: q_norm and k_norm too), then the MLP's: a
// SwiGLU's three linears, or a sparse layer's router and its experts' three on k copies of
// the rows they compute.
int64_t weight_gradients(const StagePlan& s, const DecoderLayers& layers, int blocks_first, int blocks_end) {
  const Dims& d = *layers.d;
  const MoeDims& md = *layers.md;
  int64_t wgrad = 0;
  for (int u = blocks_first; u < blocks_end; ++u) {
    wgrad += d.e * d.BT * (d.Q + 2 * d.K + 3 * d.C + (layers.qwen3() ? d.Q + d.K : 0));
    wgrad += layers.sparse(static_cast<size_t>(u - 1))
                 ? d.e * (md.route_rows(d.BT) * md.E + md.expert_rows(d.BT) * md.k * (2 * md.I + d.C))
                 : d.e * d.BT * (d.C + 2 * d.F);
  }
  if (s.head) wgrad += d.e * d.BT * (d.V + d.C);
  if (s.embedding) wgrad += d.e * d.BT * d.C;
  return wgrad;
}

// A microbatch through the stage's units in a ledger of its own: its saved tensors, the
// forward's and the backward's own peaks above them, and what a zero-bubble W waits on.
void measure(StagePlan& s, const DecoderLayers& layers, int64_t teacher_e) {
  Ledger l({true, true, true, true, true, true, true}, nullptr);
  const int64_t n_layers = layers.shape->n_layers;
  const int blocks_first = std::max(s.first, 1), blocks_end = std::min<int>(s.first + s.count, n_layers + 1);
  MicrobatchForward f = measure_forward(l, s, layers, blocks_first, blocks_end, teacher_e);
  s.saved = l.live();
  s.fwd_extra = l.peak() - s.saved;
  l.reset_peak();
  measure_backward(l, s, layers, blocks_first, f);
  s.bwd_extra = std::max<int64_t>(0, l.peak() - s.saved);
  s.wgrad = weight_gradients(s, layers, blocks_first, blocks_end);
}

}  // namespace

PipelineLayout pipeline_layout(const ModelDescription& model, const EstimateOptions& o) {
  check_pipeline(model, o);
  const int tp = o.tensor_parallel, ep = o.expert_parallel;
  PipelineLayout a;
  a.traits = &traits_of(o.strategy);
  a.dims = estimate_parallel_dims(o);
  a.shard_world = a.traits->shards ? a.dims.dp_shard : 1;
  a.expert_shard_world = a.traits->shards ? a.dims.efsdp() : 1;
  a.split_experts = o.split_experts.value_or(ep == 1);
  a.local = rank_slice(model, tp, ep, a.split_experts);
  return a;
}

StageCut cut_stages(const DecoderShape& sh, const EstimateOptions& o) {
  const auto& pp = o.pipeline;
  const int64_t n_units = sh.n_layers + 2;
  StageCut c;
  if (pp.stages_per_rank > 0 && pp.layers_per_stage == 0) {
    c.schedule = pipeline::make_schedule(pp.schedule, pp.degree, pp.microbatches, pp.stages_per_rank);
    c.units_per_stage = models::even_units_per_stage(n_units, c.schedule.num_stages);
  } else {
    auto cut = parallel::cut_pipeline({n_units, models::language_model_units(sh.n_layers)}, pp.schedule,
                                      pp.degree, pp.microbatches, pp.layers_per_stage);
    c.units_per_stage = cut.units_per_stage;
    c.schedule = cut.schedule;
  }
  FSDPP_CHECK_AS(ConfigError, static_cast<int>(c.units_per_stage.size()) == c.schedule.num_stages,
                 "[estimate] pipeline: {} stages of units, but schedule {} runs {} stages on {} ranks",
                 c.units_per_stage.size(), pp.schedule, c.schedule.num_stages, pp.degree);
  return c;
}

std::vector<StagePlan> plan_stages(const DecoderShape& sh, const EstimateOptions& o, const PipelineLayout& layout,
                                   const std::vector<int>& counts, const DecoderLayers& layers) {
  const int64_t n_units = sh.n_layers + 2;
  const int64_t teacher_e = o.teacher ? dtype_bytes(o.teacher->compute.value_or(o.teacher->dtype)) : 0;
  // The rank's units by name: a block's layer and, apart, its experts.
  std::map<std::string, const ModelDescription::Unit*> by_name;
  for (const auto& u : layout.local.units) by_name[u.name] = &u;
  std::vector<StagePlan> plan(counts.size());
  int first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    auto& st = plan[s];
    st.first = first;
    st.count = counts[s];
    first += counts[s];
    st.embedding = st.first == 0;
    st.head = st.first + st.count == n_units;
    add_shards(st, stage_units(st, sh, o, layout, by_name), dtype_bytes(o.reduce_dtype));
    measure(st, layers, teacher_e);
  }
  return plan;
}

std::vector<std::string> stage_unit_names(const StagePlan& s, int64_t n_units) {
  std::vector<std::string> names;
  for (int u = s.first; u < s.first + s.count; ++u)
    names.push_back(u == 0 ? "tok_embeddings" : u == n_units - 1 ? "head" : "layers." + std::to_string(u - 1));
  return names;
}

}  // namespace fsdpp::estimate_detail
