// Pipeline parallelism in fsdpp-train: the stages and the runtime, the pipelined step, forward
// only for evaluation and sampling. See pipeline_step.h and docs/pipeline.md#fsdpp-train.
#include "pipeline_step.h"

#include <cmath>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/pipeline/clip.h"
#include "phases.h"

namespace fsdpp::train::detail {
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

// The stages in order, forward only: the last stage's output on the rank that holds it
// (undefined elsewhere). Collective over the pp group.
at::Tensor forward_through(PipelineParts& parts, const at::Tensor& tokens) {
  const auto& sched = parts.plan.schedule;
  auto pp = parts.mesh->group("pp");
  const int me = pp->rank();
  const auto& stages = parts.runtime->stages();
  at::Device device = tokens.device();
  for (const auto& p : parts.runtime->parameters()) device = p.device();
  at::Tensor h;
  for (int st = 0; st < sched.num_stages; ++st) {
    if (sched.rank_of(st) != me) continue;
    at::Tensor in = tokens.to(device);
    if (st > 0 && sched.rank_of(st - 1) != me) in = recv_tensor(*pp, sched.rank_of(st - 1), kForwardTag + 2 * st, device);
    if (st > 0 && sched.rank_of(st - 1) == me) in = h;
    const pipeline::PipelineStage* stage = nullptr;
    for (const auto& x : stages) {
      if (x.index == st) stage = &x;
    }
    h = stage->forward(in);
    if (st + 1 < sched.num_stages && sched.rank_of(st + 1) != me) {
      send_tensor(*pp, h, sched.rank_of(st + 1), kForwardTag + 2 * (st + 1));
    }
  }
  return sched.rank_of(sched.num_stages - 1) == me ? h : at::Tensor();
}

}  // namespace

std::vector<torch::nn::Module*> PipelineParts::roots() const {
  std::vector<torch::nn::Module*> out;
  for (const auto& s : stages) out.push_back(s.ptr().get());
  return out;
}

dist::CommCounters pipeline_comm_counters(const PipelineParts& parts) {
  dist::CommCounters sum;
  for (const char* dim : {"pp", "dp_shard", "tp"}) {
    const auto c = parts.mesh->counters(dim);
    for (int k = 0; k < dist::kNumCollectives; ++k) {
      sum.bytes[static_cast<size_t>(k)] += c.bytes[static_cast<size_t>(k)];
      sum.calls[static_cast<size_t>(k)] += c.calls[static_cast<size_t>(k)];
    }
  }
  return sum;
}

void shard_pipeline(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  // The loss lives inside the stages' microbatches: there is no loss of the step to hand over.
  FSDPP_CHECK_AS(ConfigError, !s.hooks.after_loss,
                 "[train] TrainerHooks::after_loss is not called under pipeline parallelism "
                 "(parallelism.pipeline_parallel_degree={}): each microbatch's loss is computed "
                 "inside the last stage; unset the hook or the pipeline",
                 s.dims.pp);
  // model.init_from may have made the model another architecture after the config's checks.
  FSDPP_CHECK_AS(ConfigError, s.llama,
                 "[train] model.init_from made the model {} with parallelism.pipeline_parallel_degree={}: "
                 "only the Llama is cut into stages so far",
                 s.lm->describe(), s.dims.pp);
  auto parts = std::make_shared<PipelineParts>();
  parts->plan = pipeline_plan(cfg, s.dims);
  parts->mesh = s.dims.build_pipeline_mesh(world);
  auto pp = parts->mesh->group("pp");
  FullyShardOptions& fopts = s.fopts = cfg.fully_shard_options(parts->mesh->sub({"dp_shard"}));
  torch::nn::Module& model = s.lm->module();
  if (fopts.sync_module_states) {
    sync_module_states(s, model);
    fopts.sync_module_states = false;
  }
  if (s.dims.tensor_parallel()) {
    // The Llama plan on the whole model, then cut: the stages keep its hooks (docs/pipeline.md,
    // with tensor parallelism); FSDP shards what each rank holds, over dp_shard.
    s.tp_mesh = parts->mesh;
    s.tp = models::parallelize_llama(*s.llama, parts->mesh->group("tp"),
                                     {.sequence_parallel = s.dims.sequence_parallel});
    fopts.outer_layout = s.tp->outer_layout(model);
  }
  if (t.gradient_checkpointing) {
    apply_activation_checkpointing(model, t.fsdp_config.transformer_layer_cls_to_wrap,
                                   static_cast<int>(t.gradient_checkpointing_every));
  }
  // Every rank cut the same whole model; it keeps its stages (sharing the model's modules).
  auto all = models::split_llama(s.llama, parts->plan.units_per_stage);
  const auto& sched = parts->plan.schedule;
  const int last = sched.num_stages - 1;
  const WrapPolicy policy = cfg.wrap_policy();
  std::vector<pipeline::PipelineStage> mine;
  size_t units = 0;
  for (int st : sched.stages_of(pp->rank())) {
    auto stage = all[static_cast<size_t>(st)];
    units += apply_fully_shard(*stage, policy, fopts).size();
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
    if (st == last) {
      loss = [stage](const at::Tensor& logits, const at::Tensor& targets) {
        return stage->loss(logits, targets);
      };
    }
    parts->stages.push_back(stage);
    mine.push_back(pipeline::make_stage(st, stage, loss));
  }
  materialize_model(s, parts->roots());
  try {
    parts->runtime = std::make_unique<pipeline::PipelineRuntime>(
        sched, std::move(mine), pp, pipeline::RuntimeOptions{.store = world.store()});
  } catch (const ConfigError& e) {
    FSDPP_THROW(ConfigError, "[config] parallelism.pipeline_parallel_schedule={}: {}",
                cfg.parallelism.pipeline_parallel_schedule, e.what());
  }
  if (s.init) {
    s.init->load_after_sharding(parts->roots(), world.group());
    s.say(fmt::format("[train] weights from {} (model.init_from); optimizer, schedule and data "
                      "start afresh at step 1",
                      s.init->dir().string()));
  }
  int64_t held = 0;
  for (const auto& p : parts->runtime->parameters()) held += p.numel();
  s.say(fmt::format("[train] pipeline parallel: {}; {}", s.dims.describe(), parts->plan.describe()));
  s.say(fmt::format("[train] fsdp: {} over dp_shard {} per stage, {} on rank 0, {:.2f} M parameters "
                    "held by rank 0",
                    to_string(t.fsdp), s.dims.dp_shard, count_of(static_cast<int64_t>(units), "unit"),
                    held / 1e6));
  s.pipeline = std::move(parts);
}

StepOutcome pipeline_train_step(TrainSession& s, int64_t step) {
  const auto& t = s.cfg.training;
  auto& parts = *s.pipeline;
  auto& opt = *s.opt;
  const auto& trace = s.trace;
  const double lr = s.schedule.at(step);
  for (auto& group : opt.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  // The step's batch: its accumulation micro-batches, which the pipeline splits into its own.
  dist::TraceSpan data_span(trace.get(), "data");
  std::vector<at::Tensor> xs, ys;
  for (int64_t micro = 0; micro < s.accum; ++micro) {
    auto batch = s.batches->next(s.B);
    xs.push_back(batch.inputs);
    ys.push_back(batch.targets);
  }
  // On the rank's device, as train_step's batches (pinned host memory copies asynchronously).
  const auto x = at::cat(xs).to(s.world.device(), /*non_blocking=*/true);
  const auto y = at::cat(ys).to(s.world.device(), /*non_blocking=*/true);
  data_span.end();
  dist::TraceSpan pipeline_span(trace.get(), "pipeline");
  const auto out = parts.runtime->step(x, y);
  pipeline_span.end();
  dist::TraceSpan clip_span(trace.get(), "clip_grad_norm");
  const StepContext hook_context{step, s.world.rank(), s.restart_count, s.lm->module()};
  if (s.hooks.after_backward) s.hooks.after_backward(hook_context);
  const double max_norm = t.max_grad_norm > 0 ? t.max_grad_norm : INFINITY;
  // Each parameter once: the stages split over pp, and their gradients over dp_shard when the
  // strategy shards them (replicas otherwise).
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups{parts.mesh->group("pp")};
  if (traits_of(t.fsdp).shards_grads) groups.push_back(parts.mesh->group("dp_shard"));
  double grad_norm = 0;
  if (s.tp) {
    // The tp-split pieces summed over tp, the parameters tp left whole counted once.
    pipeline::TensorParallelParams params{.tp = parts.mesh->group("tp")};
    for (const auto& st : parts.runtime->stages()) {
      for (const auto& p : st.module->named_parameters()) {
        (s.tp->placement(p.key()).sharded ? params.split : params.replicated).push_back(p.value());
      }
    }
    grad_norm = pipeline::clip_grad_norm_(params, max_norm, groups);
  } else {
    grad_norm = pipeline::clip_grad_norm_(parts.runtime->parameters(), max_norm, groups);
  }
  FSDPP_CHECK(std::isfinite(grad_norm),
              "[train] step {}: the gradient norm is {} (loss {}): non-finite gradients; stopped "
              "before the optimizer step, so the parameters are those of step {}",
              step, grad_norm, out.loss, step - 1);
  clip_span.end();
  dist::TraceSpan optimizer_span(trace.get(), "optimizer");
  opt.step();
  opt.zero_grad();
  optimizer_span.end();
  return {lr, out.loss * static_cast<double>(s.accum), grad_norm, true, 1.0, 0.0};
}

double pipeline_eval_loss(TrainSession& s, const at::Tensor& x, const at::Tensor& y) {
  auto& parts = *s.pipeline;
  const auto& sched = parts.plan.schedule;
  const auto out = forward_through(parts, x);
  auto loss = torch::zeros({1}, torch::kDouble);
  if (out.defined()) {
    const auto& stages = parts.runtime->stages();
    for (const auto& st : stages) {
      if (st.index == sched.num_stages - 1) loss.fill_(st.loss(out, y.to(out.device())).item<double>());
    }
  }
  auto pp = parts.mesh->group("pp");
  auto v = loss.to(parts.runtime->parameters().front().device());
  pp->broadcast(v, sched.rank_of(sched.num_stages - 1), {"pipeline eval"});
  return v.cpu().item<double>();
}

at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options) {
  auto& parts = *s.pipeline;
  const auto& sched = parts.plan.schedule;
  const auto& cfg = s.llama->config();
  const at::Device device = parts.runtime->parameters().front().device();
  auto pp = parts.mesh->group("pp");
  auto* parallel = s.llama->parallel.get();
  auto last_logits = [&](const at::Tensor& tokens) {
    // Sequence parallelism needs a length its degree divides (as models::generate pads).
    at::Tensor context = tokens;
    int64_t t = context.size(1);
    const int64_t multiple = parallel ? parallel->sequence_multiple() : 1;
    if (t % multiple != 0 && t + multiple - t % multiple <= cfg.max_seq_len) {
      context = at::cat({context, at::zeros({context.size(0), multiple - t % multiple}, context.options())}, 1);
    } else if (t % multiple != 0) {
      context = context.narrow(1, t % multiple, t - t % multiple);
      t = context.size(1);
    }
    auto out = forward_through(parts, context);  // (B,t,V) on the last stage's ranks
    auto last = at::empty({tokens.size(0), cfg.vocab_size}, at::TensorOptions(at::kFloat).device(device));
    if (out.defined()) {
      auto l = out.select(1, t - 1).to(at::kFloat);
      last.copy_(parallel ? parallel->whole_logits(l) : l);  // tp: each rank has its columns
    }
    pp->broadcast(last, sched.rank_of(sched.num_stages - 1), {"pipeline sample"});
    return last;
  };
  return models::sample_tokens(last_logits, {cfg.max_seq_len, cfg.vocab_size},
                               prompt.to(device, at::kLong), options);
}

}  // namespace fsdpp::train::detail
