// One parallelize for every model and every combination. See
// include/fsdpp/parallel/parallelize.h and docs/parallelize.md.
#include "fsdpp/parallel/parallelize.h"

#include <fmt/format.h>

#include <torch/torch.h>

#include <algorithm>
#include <unordered_set>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/clip.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"

namespace fsdpp::parallel {
namespace {

// Point-to-point tags of the forward-only pass, apart from the runtime's (which waits for all of
// its messages by the end of each step).
constexpr int kForwardTag = 1 << 24;

// Sends `t` with its dtype and sizes first, so that the receiver needs to know neither.
void send_tensor(dist::ProcessGroup& pp, const at::Tensor& t, int dst, int tag) {
  auto c = t.contiguous();
  std::vector<int64_t> head{static_cast<int64_t>(c.scalar_type()), c.dim()};
  for (auto d : c.sizes()) head.push_back(d);
  head.resize(8, 0);
  pp.send(torch::tensor(head, torch::kLong).to(c.device()), dst, tag, {"pipeline forward"});
  pp.send(c, dst, tag + 1, {"pipeline forward"});
}

at::Tensor recv_tensor(dist::ProcessGroup& pp, int src, int tag, at::Device device) {
  auto head = at::empty({8}, at::TensorOptions(at::kLong).device(device));
  pp.recv(head, src, tag, {"pipeline forward"});
  auto h = head.cpu();
  const auto* v = h.data_ptr<int64_t>();
  std::vector<int64_t> sizes(v + 2, v + 2 + v[1]);
  auto t = at::empty(sizes, at::TensorOptions(static_cast<at::ScalarType>(v[0])).device(device));
  pp.recv(t, src, tag + 1, {"pipeline forward"});
  return t;
}

void check(const models::ModelPlan& model, const ParallelDims& d, const ParallelizeOptions& o,
           bool split_experts) {
  const auto& traits = traits_of(o.fsdp.strategy);
  FSDPP_CHECK_AS(ConfigError, d.dp_replicate == 1 || traits.hybrid,
                 "[parallel] dp_replicate={} needs a HYBRID strategy (replicas of shard groups: "
                 "hybrid_shard or hybrid_shard_zero2); got {}",
                 d.dp_replicate, to_string(o.fsdp.strategy));
  FSDPP_CHECK_AS(ConfigError, !o.sequence_parallel || d.tp > 1,
                 "[parallel] sequence parallelism splits what tensor parallelism leaves whole; it "
                 "needs tp > 1 (got tp={})",
                 d.tp);
  FSDPP_CHECK_AS(ConfigError, d.ep == 1 || model.has_experts(),
                 "[parallel] ep={}: {} has no experts to place", d.ep, model.name());
  FSDPP_CHECK_AS(ConfigError, d.ep == 1 || !split_experts,
                 "[parallel] ep={} with split_experts: experts are either split over tp or placed "
                 "over ep; leave split_experts unset or false",
                 d.ep);
  FSDPP_CHECK_AS(ConfigError, o.microbatches >= 1, "[parallel] microbatches={}: expected >= 1",
                 o.microbatches);
  FSDPP_CHECK_AS(ConfigError, o.float8.recipe == Float8Recipe::OFF || d.tp == 1,
                 "[parallel] float8 ({}) with tp={}: not built for tensor parallelism yet (a "
                 "shard's scale would need the amax over the tp group); use tp=1 or float8 off",
                 to_string(o.float8.recipe), d.tp);
  FSDPP_CHECK_AS(ConfigError, o.checkpoint_every >= 0,
                 "[parallel] checkpoint_every={}: expected 0 (none) or >= 1", o.checkpoint_every);
}

FullyShardOptions fsdp_options(const ParallelizeOptions& o, const std::shared_ptr<dist::DeviceMesh>& mesh,
                               const std::string& replicate, const std::string& shard) {
  FullyShardOptions f = o.fsdp;
  f.mesh = traits_of(f.strategy).hybrid ? mesh->sub({replicate, shard}) : mesh->sub({shard});
  return f;
}

// The stages other ranks hold lose their storage: every parameter and buffer they do not share
// with this rank's stages goes to the meta device (shapes kept), as deferred initialisation
// leaves them. A model built whole then keeps only its own stages, as fsdpp-estimate counts it.
void release_other_stages(const std::vector<models::ModelStage>& all, const std::vector<int>& mine) {
  std::unordered_set<const void*> kept;
  for (int st : mine) {
    auto& m = *all[static_cast<size_t>(st)].module;
    for (const auto& t : m.parameters()) kept.insert(t.unsafeGetTensorImpl());
    for (const auto& t : m.buffers()) kept.insert(t.unsafeGetTensorImpl());
  }
  at::NoGradGuard no_grad;
  auto release = [&](at::Tensor t) {
    if (!t.defined() || t.is_meta() || kept.count(t.unsafeGetTensorImpl())) return;
    rebind_data(t, at::empty(t.sizes(), t.options().device(at::kMeta)));
  };
  for (size_t st = 0; st < all.size(); ++st) {
    if (std::find(mine.begin(), mine.end(), static_cast<int>(st)) != mine.end()) continue;
    for (const auto& t : all[st].module->parameters()) release(t);
    for (const auto& t : all[st].module->buffers()) release(t);
  }
}

}  // namespace

std::unique_ptr<Parallelized> parallelize(std::shared_ptr<models::ModelPlan> model,
                                          dist::World& world, const ParallelDims& requested,
                                          const ParallelizeOptions& o) {
  FSDPP_CHECK(model != nullptr, "[parallel] parallelize: no model");
  const ParallelDims dims = requested.resolved(world.size());
  const bool split_experts = o.split_experts.value_or(dims.ep == 1);
  check(*model, dims, o, split_experts);
  std::unique_ptr<Parallelized> p(new Parallelized());
  p->model_ = model;
  p->options_ = o;
  // 1. The cut, decided first.
  if (dims.pp > 1) {
    p->cut_ = cut_pipeline(pipeline_units_of(*model), o.schedule, dims.pp, o.microbatches,
                           o.layers_per_stage);
  }
  p->mesh_ = std::make_unique<ParallelMesh>(world, dims);
  auto& mesh = *p->mesh_;
  // Experts apart from the dense weights: over ep, or whole under tp with each rank routing its
  // own tokens; their FSDP is over efsdp = dp_shard x tp / ep, which sums what every rank's
  // tokens gave them.
  const bool own_mesh = model->has_experts() && (dims.ep > 1 || (dims.tp > 1 && !split_experts));
  if (own_mesh) mesh.build_sparse();
  torch::nn::Module& whole = model->module();
  // 2. Tensor (and sequence) parallelism.
  OuterLayoutOf dense_layout;
  if (dims.tp > 1) {
    auto tp = model->apply_tensor_parallel({mesh.group("tp"), o.sequence_parallel, split_experts});
    dense_layout = tp.outer_layout(whole, "tp");
  }
  // 3. Float8 GEMMs, then activation checkpointing.
  if (o.float8.recipe != Float8Recipe::OFF) {
    p->float8_projections_ = models::convert_to_float8(whole, o.float8);
  }
  if (o.checkpoint_every > 0) {
    p->num_checkpointed_ = apply_activation_checkpointing(
        whole, o.checkpoint_classes.empty() ? model->block_classes() : o.checkpoint_classes,
        o.checkpoint_every, CheckpointOptions{.keep_products = o.checkpoint_selective}).size();
  }
  // 4. Experts: placed over ep, their statistics over the global batch.
  OuterLayoutOf expert_layout;
  if (model->has_experts()) {
    expert_layout = model->apply_experts({own_mesh ? mesh.group("ep") : nullptr, mesh.group("dp")});
  }
  // 5. The cut made: this rank's stages, or the whole model as the one stage.
  if (dims.pp > 1) {
    auto all = model->split(p->cut_.units_per_stage);
    const int me = mesh.group("pp")->rank();
    const auto mine = p->cut_.schedule.stages_of(me);
    for (int st : mine) {
      p->stages_.push_back(all[static_cast<size_t>(st)]);
      p->roots_.push_back(all[static_cast<size_t>(st)].module);
      p->stage_index_.push_back(st);
    }
    release_other_stages(all, mine);
  } else {
    p->roots_.push_back(std::shared_ptr<torch::nn::Module>(std::shared_ptr<void>(), &whole));
    p->stage_index_.push_back(0);
  }
  // 6. FSDP / HSDP on every stage.
  FullyShardOptions dense = fsdp_options(o, mesh.dense(), "dp_replicate", "dp_shard");
  dense.outer_layout = dense_layout;
  FullyShardOptions experts;
  if (own_mesh) {
    experts = fsdp_options(o, mesh.sparse(), "dp_replicate", "efsdp");
    experts.outer_layout = expert_layout;
    // Summed over every rank's tokens (ep's all-to-all, then efsdp and the replicas): the
    // average over the data-parallel ranks, as the dense weights get.
    if (experts.gradient_divide_factor <= 0) experts.gradient_divide_factor = dims.dp();
  }
  const auto policy = o.wrap.value_or(transformer_layer_policy(model->block_classes()));
  for (auto& root : p->roots_) {
    if (own_mesh) {
      for (auto* m : model->expert_modules(*root)) {
        fully_shard(*m, experts);
        ++p->num_units_;
      }
    }
    FullyShardOptions root_options = dense;
    if (o.root_output_dtype) root_options.mp_policy.output_dtype = *o.root_output_dtype;
    const auto made = apply_fully_shard(*root, policy, dense, root_options);
    p->num_units_ += made.size();
    if (o.keep_ends_gathered && dims.pp == 1) keep_ends_gathered(*root, made);
  }
  if (o.materialize) o.materialize(p->roots());
  // 7. The pipeline runtime.
  if (dims.pp > 1) {
    std::vector<pipeline::PipelineStage> mine;
    for (size_t i = 0; i < p->stages_.size(); ++i) {
      pipeline::PipelineStage s;
      s.index = p->stage_index_[i];
      s.module = p->stages_[i].module;
      s.forward = p->stages_[i].forward;
      s.forward_shared = p->stages_[i].forward_positions;  // a language model's: positions
      if (auto loss = p->stages_[i].loss) {
        // The model's own loss; forward_backward gives each step's (scaled, its objective).
        s.loss = [loss](const at::Tensor& y, const at::Tensor& t) { return loss(y, t, {}).loss; };
      }
      mine.push_back(std::move(s));
    }
    auto ro = o.runtime;
    if (!ro.store) ro.store = world.store();
    p->runtime_ = std::make_unique<pipeline::PipelineRuntime>(p->cut_.schedule, std::move(mine),
                                                              mesh.group("pp"), ro);
  }
  p->make_record();
  return p;
}

std::vector<torch::nn::Module*> Parallelized::roots() const {
  std::vector<torch::nn::Module*> out;
  for (const auto& r : roots_) out.push_back(r.get());
  return out;
}

std::vector<at::Tensor> Parallelized::parameters() const {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& r : roots_) {
    for (const auto& t : r->parameters()) {
      if (seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
    }
  }
  return out;
}

pipeline::PipelineRuntime& Parallelized::runtime() {
  FSDPP_CHECK(runtime_ != nullptr, "[parallel] runtime(): the model is not pipelined (pp=1)");
  return *runtime_;
}

void Parallelized::make_record() {
  record_.clear();
  const bool pp = dims().pp > 1;
  for (size_t i = 0; i < roots_.size(); ++i) {
    for (auto& view : sharded_params(*roots_[i], "parallelize")) {
      ParamRecord r;
      r.stage = stage_index_[i];
      if (pp) r.split_over.push_back("pp");
      for (const auto& pl : view.placements) r.split_over.push_back(mesh_->dim_of(pl.group));
      if (view.replicate_group) r.replicated_over.push_back(mesh_->dim_of(view.replicate_group));
      for (const auto& g : view.outer_replicas) r.replicated_over.push_back(mesh_->dim_of(g));
      r.view = std::move(view);
      record_.push_back(std::move(r));
    }
  }
}

double token_loss_divisor(int64_t loss_tokens, int64_t dp, int microbatches) {
  if (loss_tokens <= 0) return 1.0;  // every token loss is 0: any divisor keeps it so
  return static_cast<double>(loss_tokens) / static_cast<double>(dp * microbatches);
}

int64_t Parallelized::count_loss_tokens(const at::Tensor& targets) {
  if (model_->causal_lm() == nullptr || (runtime_ && last_stage() == nullptr)) return 0;
  FSDPP_CHECK_AS(ConfigError, targets.defined(),
                 "[parallel] forward_backward: no targets on a rank that computes the loss");
  // Every data-parallel rank of this (pp, tp) coordinate counts: the whole group or none (a
  // pipeline's last stage is on the same pp rank in every one of them). tp ranks hold the same
  // targets and count in their own dp groups, so nothing is counted twice.
  // Summed over dp_shard, then dp_replicate (HSDP): the dims whose traffic the trainer and the
  // mesh count (the flattened "dp" group is a group of its own that neither counts).
  auto n = (targets != -100).sum().to(at::kLong).reshape({1});
  for (const char* dim : {"dp_shard", "dp_replicate"}) {
    const auto& group = mesh_->group(dim);
    if (group->size() > 1) group->all_reduce(n, dist::ReduceOp::SUM, {"loss tokens"});
  }
  return n.cpu().item<int64_t>();
}

StepLoss Parallelized::forward_backward(const at::Tensor& inputs, const at::Tensor& targets,
                                        double loss_scale, const MicrobatchCalls& calls) {
  return forward_backward(inputs, targets, at::Tensor(), loss_scale, calls);
}

StepLoss Parallelized::forward_backward(const at::Tensor& inputs, const at::Tensor& targets,
                                        const at::Tensor& positions, double loss_scale,
                                        const MicrobatchCalls& calls) {
  const int m = options_.microbatches;
  FSDPP_CHECK_AS(ConfigError, inputs.dim() >= 1 && inputs.size(0) % m == 0,
                 "[parallel] forward_backward: {} rows do not divide into {} microbatches",
                 inputs.dim() >= 1 ? inputs.size(0) : 0, m);
  FSDPP_CHECK_AS(ConfigError, !positions.defined() || model_->causal_lm() != nullptr,
                 "[parallel] forward_backward: token positions (document masking) for {}, which "
                 "is not a language model; expected no positions",
                 model_->name());
  FSDPP_CHECK_AS(ConfigError, !positions.defined() || positions.sizes() == inputs.sizes(),
                 "[parallel] forward_backward: positions of shape {} for inputs of shape {}; "
                 "expected one position per token",
                 positions.sizes(), inputs.sizes());
  // Before the forward: the global batch's loss-bearing tokens, so that every microbatch's
  // token losses are summed over one divisor (the loss of one process over the whole batch).
  // Its own span: the all-reduce is where a rank waits for one that is still loading its batch.
  dist::TraceSpan tokens_span(calls.trace, "loss_tokens");
  const int64_t tokens = count_loss_tokens(targets);
  tokens_span.end();
  const double divisor = token_loss_divisor(tokens, dims().dp(), m);
  auto out = runtime_ ? pipeline_step(inputs, targets, positions, divisor, loss_scale, calls)
                      : one_stage_step(inputs, targets, positions, divisor, loss_scale, calls);
  out.loss_tokens = tokens;
  return out;
}

StepLoss Parallelized::pipeline_step(const at::Tensor& inputs, const at::Tensor& targets,
                                     const at::Tensor& positions, double divisor,
                                     double loss_scale, const MicrobatchCalls& calls) {
  const int m = options_.microbatches;
  FSDPP_CHECK_AS(ConfigError, !calls.after_loss && calls.hidden_layers.empty(),
                 "[parallel] forward_backward: {} under a pipeline (pp={}): each microbatch's "
                 "loss is computed inside the last stage, which holds only its own layers; "
                 "expected neither after_loss nor hidden_layers",
                 calls.after_loss ? "an after_loss hook" : "hidden layers for the objective",
                 dims().pp);
  // The last stage's loss of microbatch k: the model's, with its cross entropy over the step's
  // divisor or the objective's token loss, times the gradient scaler's scale; its load-balancing
  // loss kept for the step's mean.
  StepLoss out;
  std::vector<double> aux(static_cast<size_t>(m), 0.0);
  const auto* last = last_stage();
  const auto& objective = calls.objective;
  auto* lm = model_->causal_lm();
  auto loss_of = [&](const at::Tensor& y, const at::Tensor& t, int k) {
    models::TokenLoss token;
    if (objective) {
      token = [&objective, k, divisor](const at::Tensor& l, const at::Tensor& tt) {
        return objective(l, tt, k, {}, divisor);
      };
    } else if (lm) {
      token = [lm, divisor](const at::Tensor& l, const at::Tensor& tt) {
        return lm->cross_entropy(l, tt, divisor);
      };
    }
    auto r = last->loss(y, t, token);
    if (r.aux_loss.defined()) aux[static_cast<size_t>(k)] = r.aux_loss.item<double>();
    return loss_scale == 1.0 ? r.loss : r.loss * loss_scale;
  };
  const auto loss = last ? pipeline::MicrobatchLoss(loss_of) : pipeline::MicrobatchLoss();
  const auto step = runtime_->step(inputs, targets, loss, positions);
  out.loss = step.loss / loss_scale;
  if (model_->has_experts()) {
    double sum = 0;
    for (double a : aux) sum += a;
    auto mean = at::full({1}, sum / m, at::TensorOptions(at::kDouble));
    from_last_stage(mean, "pipeline aux loss");
    out.aux_loss = mean.item<double>();
  }
  return out;
}

StepLoss Parallelized::one_stage_step(const at::Tensor& inputs, const at::Tensor& targets,
                                      const at::Tensor& positions, double divisor,
                                      double loss_scale, const MicrobatchCalls& calls) {
  const int m = options_.microbatches;
  const int64_t rows = inputs.size(0) / m;
  double loss_sum = 0, aux_sum = 0;
  for (int k = 0; k < m; ++k) {
    dist::TraceSpan forward_span(calls.trace, "forward");
    auto r = one_stage_loss(inputs.narrow(0, k * rows, rows), targets.narrow(0, k * rows, rows),
                            positions.defined() ? positions.narrow(0, k * rows, rows) : positions,
                            divisor, k, calls);
    forward_span.end();
    dist::TraceSpan backward_span(calls.trace, "backward");
    if (calls.after_loss) calls.after_loss(k, r.loss);
    const auto mean_part = r.loss / m;  // then scaled, as a gradient scaler's scale() does
    (loss_scale == 1.0 ? mean_part : mean_part * loss_scale).backward();
    loss_sum += r.loss.item<double>();
    if (r.aux_loss.defined()) aux_sum += r.aux_loss.item<double>();
  }
  return {loss_sum / m, aux_sum / m};
}

models::StageLoss Parallelized::one_stage_loss(const at::Tensor& inputs, const at::Tensor& targets,
                                               const at::Tensor& positions, double divisor, int k,
                                               const MicrobatchCalls& calls) {
  auto* lm = model_->causal_lm();
  if (!lm) {
    FSDPP_CHECK_AS(ConfigError, !calls.objective,
                   "[parallel] forward_backward: an objective in place of the cross entropy needs "
                   "the logits of a language model without a pipeline, and {} is not one (a "
                   "pipelined model's last stage gives them)",
                   model_->name());
    FSDPP_CHECK_AS(ConfigError, calls.hidden_layers.empty(),
                   "[parallel] forward_backward: hidden layers without an objective to read them");
    auto r = model_->loss(inputs, targets);
    FSDPP_CHECK(r.loss.defined() && r.loss.numel() == 1 && r.loss.is_floating_point(),
                "[parallel] forward_backward: the loss of {} is {}; expected a floating-point "
                "scalar (the microbatch's mean loss)",
                model_->name(),
                r.loss.defined() ? fmt::format("a {} tensor of {} elements",
                                               c10::toString(r.loss.scalar_type()), r.loss.numel())
                                 : std::string("undefined"));
    return r;
  }
  FSDPP_CHECK_AS(ConfigError, calls.objective || calls.hidden_layers.empty(),
                 "[parallel] forward_backward: hidden layers without an objective to read them");
  // A language model: its features, then the cross entropy over the step's divisor (or the
  // objective) and the model's own terms, as its forward with targets adds them.
  auto out = lm->forward_features(inputs, /*aux_loss=*/true, calls.hidden_layers, positions);
  auto loss = calls.objective ? calls.objective(out.logits, targets, k, out.hidden_states, divisor)
                              : lm->cross_entropy(out.logits, targets, divisor);
  if (out.aux_loss.defined()) {
    loss = loss + model_->aux_loss_coef() * out.aux_loss.to(loss.scalar_type());
  }
  return {loss, out.aux_loss};
}

const models::ModelStage* Parallelized::last_stage() const {
  for (const auto& st : stages_) {
    if (st.loss) return &st;
  }
  return nullptr;
}

void Parallelized::from_last_stage(at::Tensor& value, const char* what) {
  at::Device device = at::kCPU;
  for (const auto& p : parameters()) device = p.device();
  auto v = value.to(device);
  mesh_->group("pp")->broadcast(v, last_stage_rank(), {what});
  value = v.cpu();
}

std::vector<int64_t> Parallelized::expert_load() {
  auto load = model_->expert_load();
  if (!runtime_ || !model_->has_experts()) return load;
  // The last stage's count of experts (every rank knows the model's), then its load.
  auto n = at::full({1}, static_cast<int64_t>(load.size()), at::TensorOptions(at::kLong));
  from_last_stage(n, "pipeline expert load");
  load.resize(static_cast<size_t>(n.item<int64_t>()), 0);
  auto t = at::tensor(load, at::TensorOptions(at::kLong));
  from_last_stage(t, "pipeline expert load");
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

double Parallelized::clip_grad_norm_(double max_norm, double norm_type) {
  std::vector<ShardedParam> views;
  for (const auto& r : record_) views.push_back(r.view);
  std::vector<GroupPtr> across;
  if (dims().pp > 1) across.push_back(mesh_->group("pp"));
  return fsdpp::clip_grad_norm_(views, max_norm, norm_type, across);
}

std::unique_ptr<ShardedGradScaler> Parallelized::grad_scaler(GradScalerOptions options) const {
  return std::make_unique<ShardedGradScaler>(roots(), options, mesh_->dense_groups());
}

}  // namespace fsdpp::parallel

namespace fsdpp::parallel {

int Parallelized::last_stage_rank() const {
  return runtime_ ? cut_.schedule.rank_of(cut_.schedule.num_stages - 1) : 0;
}

at::Tensor Parallelized::forward_stages(const at::Tensor& tokens, const at::Tensor& positions) {
  auto* lm = model_->causal_lm();
  FSDPP_CHECK(lm != nullptr || (runtime_ && !positions.defined()),
              "[parallel] forward_stages: {} is not a language model ({})", model_->name(),
              positions.defined() ? "no token positions" : "no logits");
  if (!runtime_) return lm->forward_features(tokens, false, {}, positions).logits;
  const auto& sched = cut_.schedule;
  auto& pp = *mesh_->group("pp");
  const int me = pp.rank();
  at::Device device = tokens.device();
  for (const auto& p : parameters()) device = p.device();
  at::Tensor h;
  for (int st = 0; st < sched.num_stages; ++st) {
    if (sched.rank_of(st) != me) continue;
    at::Tensor in = tokens.to(device);
    if (st > 0) {
      in = sched.rank_of(st - 1) == me ? h
                                       : recv_tensor(pp, sched.rank_of(st - 1), kForwardTag + 2 * st, device);
    }
    for (size_t i = 0; i < stages_.size(); ++i) {
      if (stage_index_[i] != st) continue;
      h = positions.defined() ? stages_[i].forward_positions(in, positions.to(device))
                              : stages_[i].forward(in);
    }
    if (st + 1 < sched.num_stages && sched.rank_of(st + 1) != me) {
      send_tensor(pp, h, sched.rank_of(st + 1), kForwardTag + 2 * (st + 1));
    }
  }
  return sched.rank_of(sched.num_stages - 1) == me ? h : at::Tensor();
}

double Parallelized::eval_loss(const at::Tensor& inputs, const at::Tensor& targets,
                               const at::Tensor& positions) {
  at::NoGradGuard no_grad;
  if (!runtime_ && !positions.defined()) return model_->loss(inputs, targets).loss.item<double>();
  if (!runtime_) {
    auto* lm = model_->causal_lm();
    FSDPP_CHECK_AS(ConfigError, lm != nullptr,
                   "[parallel] eval_loss: token positions (document masking) for {}, which is "
                   "not a language model; expected no positions",
                   model_->name());
    return lm->forward(inputs, targets, positions).loss.item<double>();
  }
  const auto out = forward_stages(inputs, positions);
  at::Device device = inputs.device();
  for (const auto& p : parameters()) device = p.device();
  auto loss = torch::zeros({1}, torch::TensorOptions(torch::kDouble).device(device));
  if (out.defined()) {
    for (const auto& st : stages_) {
      if (st.loss) loss.fill_(st.loss(out, targets.to(out.device()), {}).loss.item<double>());
    }
  }
  mesh_->group("pp")->broadcast(loss, last_stage_rank(), {"pipeline eval"});
  return loss.cpu().item<double>();
}

dist::CommCounters Parallelized::comm_counters() const {
  dist::CommCounters sum;
  for (const auto* m : {&mesh_->dense(), &mesh_->sparse()}) {
    if (!*m) continue;
    for (const auto& name : (*m)->dim_names()) {
      const auto c = (*m)->counters(name);
      for (int k = 0; k < dist::kNumCollectives; ++k) {
        sum.bytes[static_cast<size_t>(k)] += c.bytes[static_cast<size_t>(k)];
        sum.calls[static_cast<size_t>(k)] += c.calls[static_cast<size_t>(k)];
      }
    }
  }
  return sum;
}

}  // namespace fsdpp::parallel
