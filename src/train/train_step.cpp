// train_step (phases.h): one optimizer step over gradient_accumulation_steps accumulation batches
// through parallel::Parallelized::forward_backward (pipelined or one stage), with the caller's
// hooks at their points (hooks.h) and the trace's spans around its parts.
#include <cmath>
#include <string>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/nonfinite_grad.h"
#include "phases.h"
#include "pipeline_step.h"

namespace fsdpp::train::detail {
namespace {

// Throws naming the step and where the non-finite values came from: the loss when some rank's
// loss is non-finite (then every gradient is too), else the first parameter whose gradient is.
// Collective: every rank gets here together, after the all-reduce inside clip_grad_norm_.
[[noreturn]] void stop_on_nonfinite(torch::nn::Module& model, dist::World& world, int64_t step,
                                    double loss_sum) {
  auto flag = torch::tensor({std::isfinite(loss_sum) ? int64_t{0} : int64_t{world.size() - world.rank()}});
  world.group()->all_reduce(flag, dist::ReduceOp::MAX, {"nonfinite_check"});
  const int64_t v = flag.item<int64_t>();
  const auto grad = first_nonfinite_grad(model, world.group().get());
  if (v > 0) {
    FSDPP_THROW(Error,
                "[train] step {}: the loss is not finite on rank {}: non-finite values first "
                "appeared in 'loss' (every gradient follows from it); stopped before the "
                "optimizer step, so the parameters are those of step {}. Lower "
                "training.learning_rate, or check the data",
                step, world.size() - v, step - 1);
  }
  FSDPP_THROW(Error,
              "[train] step {}: the gradient of parameter '{}' is {} on rank {} while the loss is "
              "finite: non-finite values first appeared there; stopped before the optimizer "
              "step, so the parameters are those of step {}",
              step, grad ? grad->name : std::string("?"), grad ? grad->kind : "not finite",
              grad ? grad->rank : 0, step - 1);
}

// The student's gradients and `extra` (whole on every rank, already averaged: the distillation's
// layer projections) clipped together by their one global norm, as torch's clip_grad_norm_
// over the student's and the projections' parameters would; returns it.
double clip_together(TrainSession& s, const std::vector<at::Tensor>& extra, double max_norm) {
  at::NoGradGuard no_grad;
  const double student = s.parallel->clip_grad_norm_(INFINITY);  // the student's norm alone
  double sq = student * student;
  for (const auto& p : extra) {
    if (!p.grad().defined()) continue;
    const double n = at::linalg_vector_norm(p.grad(), 2.0, {}, false, at::kDouble).item<double>();
    sq += n * n;
  }
  const double total = std::sqrt(sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (auto& p : s.lm->module().parameters()) {
      if (p.grad().defined()) p.grad().mul_(coef);
    }
    for (const auto& p : extra) {
      if (p.grad().defined()) p.grad().mul_(coef);
    }
  }
  return total;
}

// The step's accumulation batches, on the rank's device (asynchronously from pinned
// batches, training.dataloader_pin_memory), and their token positions (document masking; each
// undefined without it).
std::vector<data::BatchLoader::Batch> next_batches(TrainSession& s,
                                                   std::vector<at::Tensor>& positions) {
  std::vector<data::BatchLoader::Batch> out;
  for (int64_t micro = 0; micro < s.steps.accumulation_steps; ++micro) {
    auto batch = s.batches->next(s.steps.batch_size);
    batch.inputs = batch.inputs.to(s.world.device(), /*non_blocking=*/true);
    batch.targets = batch.targets.to(s.world.device(), /*non_blocking=*/true);
    if (batch.positions.defined()) {
      batch.positions = batch.positions.to(s.world.device(), /*non_blocking=*/true);
    }
    FSDPP_CHECK(micro == 0 || batch.positions.defined() == positions.front().defined(),
                "[train] some accumulation batches of a step have token positions and others none; "
                "expected all or none");
    positions.push_back(batch.positions);
    out.push_back({batch.inputs, batch.targets, batch.starts});
  }
  return out;
}

// The step's rows and what each microbatch's loss is: the data and the model's loss, or, when
// distilling, the distiller's rows (the data or sampled sequences: by the student through its
// stages, or by the teacher) and its objective. Collective.
distill::Distiller::StepRows step_rows(TrainSession& s, int64_t step) {
  dist::TraceSpan data_span(s.trace.get(), "data");
  std::vector<at::Tensor> positions;
  const auto batches = next_batches(s, positions);
  if (!s.distiller) {
    std::vector<at::Tensor> xs, ys;
    for (const auto& b : batches) {
      xs.push_back(b.inputs);
      ys.push_back(b.targets);
    }
    return {at::cat(xs), at::cat(ys), {}, {},
            positions.front().defined() ? at::cat(positions) : at::Tensor()};
  }
  data_span.end();
  dist::TraceSpan teacher_span(s.trace.get(), "teacher");
  auto& p = *s.parallel;
  const bool last = p.mesh().group("pp")->rank() == p.last_stage_rank();
  auto student = [&s](const at::Tensor& prompt, const models::GenerateOptions& o) {
    return s.pipelined() ? pipeline_generate(s, prompt, o) : s.lm->generate(prompt, o);
  };
  const int microbatches = s.pipelined() ? p.runtime().schedule().num_microbatches
                                         : static_cast<int>(s.steps.accumulation_steps);
  return s.distiller->rows(batches, positions, step, student, microbatches, s.pipelined(), last);
}

}  // namespace

// Every run's step: the rows through parallel::Parallelized::forward_backward, a model without a
// pipeline being one stage (gradient accumulation over its accumulation batches there).
StepOutcome train_step(TrainSession& s, int64_t step) {
  const auto& t = s.cfg.training;
  auto& world = s.world;
  torch::nn::Module& model = s.lm->module();
  auto& opt = *s.opt;
  auto& scaler = *s.scaler;
  const auto& trace = s.trace;
  const double lr = s.lr_schedule.at(step);
  for (auto& group : opt.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  const StepContext hook_context{step, world.rank(), s.restart_count, model};
  const auto rows = step_rows(s, step);
  parallel::MicrobatchCalls calls{rows.objective, rows.hidden_layers, {}, trace.get()};
  if (s.hooks.after_loss) {
    calls.after_loss = [&](int, at::Tensor& loss) { s.hooks.after_loss(hook_context, loss); };
  }
  // A pipeline's step is one span (its runtime traces its own); one stage's accumulation batches have
  // their forward and backward spans.
  dist::TraceSpan pipeline_span(s.pipelined() ? trace.get() : nullptr, "pipeline");
  const double scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  const auto out =
      s.parallel->forward_backward(rows.inputs, rows.targets, rows.positions, scale, calls);
  pipeline_span.end();
  // This rank's share of the step's loss (its mean over the ranks is the global batch's token
  // mean, parallel::StepLoss) times the accumulation batches, as train_loop reads it.
  const double loss_sum = out.loss * static_cast<double>(s.steps.accumulation_steps);
  dist::TraceSpan clip_span(trace.get(), "clip_grad_norm");
  // distillation.layer_projection's maps, whole on every rank: their gradients averaged over the
  // ranks as FSDP averages the student's.
  const auto* projections = s.distiller ? s.distiller->projections() : nullptr;
  const auto extra = projections ? projections->parameters() : std::vector<at::Tensor>{};
  if (!extra.empty()) projections->average_gradients(*world.group());
  if (s.hooks.after_backward) s.hooks.after_backward(hook_context);
  scaler.unscale_();  // fp16: the gradients divided back, inf/nan agreed over every mesh dim
  const double max_norm = t.max_grad_norm > 0 ? t.max_grad_norm : INFINITY;
  // From the record of parallelize: each parameter once, its parts summed over the mesh dims
  // that split it, then over pp.
  const double grad_norm =
      extra.empty() ? s.parallel->clip_grad_norm_(max_norm) : clip_together(s, extra, max_norm);
  // The norm is non-finite exactly when a gradient element is: one check per step, and the
  // search for the culprit only then. Under fp16 the loss scaler skips such steps instead.
  if (!t.fp16 && !std::isfinite(grad_norm)) stop_on_nonfinite(model, world, step, loss_sum);
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
  return {lr, loss_sum, grad_norm, stepped, loss_scale, out.aux_loss * static_cast<double>(s.steps.accumulation_steps)};
}

}  // namespace fsdpp::train::detail
