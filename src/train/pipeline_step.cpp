// Pipeline parallelism in fsdpp-train: the pipelined step and sampling through the stages of the
// Parallelized model. See pipeline_step.h and docs/pipeline.md#fsdpp-train.
#include "pipeline_step.h"

#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "phases.h"

namespace fsdpp::train::detail {

StepOutcome pipeline_train_step(TrainSession& s, int64_t step) {
  const auto& t = s.cfg.training;
  auto& p = *s.parallel;
  auto& opt = *s.opt;
  auto& scaler = *s.scaler;
  const auto& trace = s.trace;
  const double lr = s.schedule.at(step);
  for (auto& group : opt.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  // The step's batch: its accumulation micro-batches, which the pipeline splits into its own,
  // on the rank's device as train_step's (pinned host memory copies asynchronously).
  dist::TraceSpan data_span(trace.get(), "data");
  std::vector<data::BatchLoader::Batch> micro_batches;
  std::vector<at::Tensor> xs, ys;
  for (int64_t micro = 0; micro < s.accum; ++micro) {
    auto batch = s.batches->next(s.B);
    batch.inputs = batch.inputs.to(s.world.device(), /*non_blocking=*/true);
    batch.targets = batch.targets.to(s.world.device(), /*non_blocking=*/true);
    xs.push_back(batch.inputs);
    ys.push_back(batch.targets);
    micro_batches.push_back({batch.inputs, batch.targets, batch.starts});
  }
  data_span.end();
  // Distilling: each micro-batch's rows (the data, or sampled through the stages or by the
  // teacher) and the teacher's side of them, for the last stage's objective.
  Distiller::PipelineRows rows{at::cat(xs), at::cat(ys), {}};
  if (s.distiller) {
    dist::TraceSpan teacher_span(trace.get(), "teacher");
    const bool last = p.mesh().group("pp")->rank() == p.last_stage_rank();
    auto student = [&s](const at::Tensor& prompt, const models::GenerateOptions& o) {
      return pipeline_generate(s, prompt, o);
    };
    rows = s.distiller->pipeline_rows(micro_batches, step, student,
                                      p.runtime().schedule().num_microbatches, last);
  }
  dist::TraceSpan pipeline_span(trace.get(), "pipeline");
  const double scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  const auto out = p.forward_backward(rows.inputs, rows.targets, scale, rows.objective);
  pipeline_span.end();
  dist::TraceSpan clip_span(trace.get(), "clip_grad_norm");
  const StepContext hook_context{step, s.world.rank(), s.restart_count, s.lm->module()};
  if (s.hooks.after_backward) s.hooks.after_backward(hook_context);
  scaler.unscale_();  // fp16: the gradients divided back, inf/nan agreed over every mesh dim
  const double max_norm = t.max_grad_norm > 0 ? t.max_grad_norm : INFINITY;
  const double grad_norm = p.clip_grad_norm_(max_norm);  // each parameter once, from the record
  FSDPP_CHECK(t.fp16 || std::isfinite(grad_norm),
              "[train] step {}: the gradient norm is {} (loss {}): non-finite gradients; stopped "
              "before the optimizer step, so the parameters are those of step {}",
              step, grad_norm, out.loss, step - 1);
  clip_span.end();
  dist::TraceSpan optimizer_span(trace.get(), "optimizer");
  const bool stepped = !scaler.found_inf();  // an overflow skips the step on every rank
  if (stepped && s.offload) {
    s.offload->step();
  } else if (stepped) {
    opt.step();
  }
  const double loss_scale = scaler.get_scale();
  scaler.update();
  opt.zero_grad();
  optimizer_span.end();
  // Sums over the accumulation micro-batches, as train_step's: the means times their count.
  const double accum = static_cast<double>(s.accum);
  return {lr, out.loss * accum, grad_norm, stepped, loss_scale, out.aux_loss * accum};
}

at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options) {
  auto& p = *s.parallel;
  const int64_t max_seq_len = s.cfg.model.max_seq_len, vocab = s.lm->vocab_size();
  at::Device device = prompt.device();
  for (const auto& t : p.parameters()) device = t.device();
  auto pp = p.mesh().group("pp");
  auto* parallel = s.lm->tensor_parallel();  // tp: each rank has its columns
  auto last_logits = [&](const at::Tensor& tokens) {
    // Sequence parallelism needs a length its degree divides (as models::generate pads).
    at::Tensor context = tokens;
    int64_t t = context.size(1);
    const int64_t multiple = parallel ? parallel->sequence_multiple() : 1;
    if (t % multiple != 0 && t + multiple - t % multiple <= max_seq_len) {
      context = at::cat({context, at::zeros({context.size(0), multiple - t % multiple}, context.options())}, 1);
    } else if (t % multiple != 0) {
      context = context.narrow(1, t % multiple, t - t % multiple);
      t = context.size(1);
    }
    auto out = p.forward_stages(context);  // (B,t,V) on the last stage's ranks
    auto last = at::empty({tokens.size(0), vocab}, at::TensorOptions(at::kFloat).device(device));
    if (out.defined()) {
      auto l = out.select(1, t - 1).to(at::kFloat);
      last.copy_(parallel ? parallel->whole_logits(l) : l);  // tp: each rank has its columns
    }
    pp->broadcast(last, p.last_stage_rank(), {"pipeline sample"});
    return last;
  };
  return models::sample_tokens(last_logits, {max_seq_len, vocab}, prompt.to(device, at::kLong),
                               options);
}

}  // namespace fsdpp::train::detail
