// train_loop (phases.h): the steps from first_step to total_steps, each followed by the metrics
// all-reduce (which carries the stop signal), evaluation, the step's report and saves as
// configured; it ends early, after a whole step on every rank, when a signal asks.
#include <chrono>
#include <cmath>
#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "phases.h"

namespace fsdpp::train::detail {
namespace {

using Clock = std::chrono::steady_clock;

// The model's collectives so far; pipelined: every mesh dim's traffic (the stages' collectives
// and their messages on pp).
dist::CommCounters model_counters(TrainSession& s) {
  return s.pipelined() ? s.parallel->comm_counters() : fsdpp::comm_counters(s.lm->module());
}

// The byte counters a step's report subtracts: the model's, their split over the shard groups
// and the replicas, and tensor parallelism's own.
struct CommMark {
  dist::CommCounters all;
  std::pair<uint64_t, uint64_t> split;
  uint64_t tp = 0;
};

CommMark comm_mark(TrainSession& s, const std::shared_ptr<dist::ProcessGroup>& tp_group) {
  return {model_counters(s), comm_split(s), tp_group ? tp_group->counters().total_bytes() : 0};
}

// What a logged step produced, for the Reporter: the outcome, its time and the bytes its
// collectives moved since `before`; the experts' load and the distiller's figures when there are.
observe::StepReport step_report(TrainSession& s, int64_t step, const StepOutcome& out, double loss,
                                double step_ms, const CommMark& before,
                                const std::shared_ptr<dist::ProcessGroup>& tp_group,
                                const std::vector<int64_t>& expert_load) {
  observe::StepReport r{.step = step, .loss = loss, .lr = out.lr, .grad_norm = out.grad_norm};
  if (s.cfg.training.fp16) {
    r.loss_scaling = observe::StepReport::LossScaling{out.loss_scale, s.scaler->skipped_steps(),
                                                      !out.stepped};
  }
  r.tokens = s.steps.tokens_per_step;
  r.step_ms = step_ms;
  const auto now = comm_mark(s, tp_group);
  r.comm_bytes = (now.all - before.all).total_bytes();
  r.comm_bytes_intra = now.split.first - before.split.first;
  r.comm_bytes_inter = now.split.second - before.split.second;
  // Tensor parallelism's activations and loss, on the tp dim (docs/tensor-parallel.md).
  if (tp_group) r.comm_bytes_tp = now.tp - before.tp;
  if (s.expert_load) {
    // The load-balancing loss is over the global batch already: the same on every rank
    // (pipelined: the last stage's, on every rank of the pp group).
    const auto load = models::summarize_expert_load(expert_load);
    r.experts = observe::StepReport::Experts{out.aux_loss_sum / s.steps.accumulation_steps, load.min, load.max, load.cv};
  }
  if (s.distiller) s.distiller->log_step(r.figures, s.world);  // kd_loss, ce_loss, the teacher's
  return r;
}

}  // namespace

bool stop_requested(TrainSession& s) {
  if (s.world.size() == 1) return s.stop_signal->received() != 0;
  auto flag = torch::tensor({s.stop_signal->received() != 0 ? 1.0 : 0.0}, torch::kDouble);
  s.world.group()->all_reduce(flag, dist::ReduceOp::MAX, {"stop signal"});
  return flag.item<double>() > 0;
}

void train_loop(TrainSession& s) {
  const auto& t = s.cfg.training;
  auto& world = s.world;
  const auto& trace = s.trace;
  auto& stop_signal = s.stop_signal;
  auto& reporter = *s.reporter;
  const int64_t total_steps = s.steps.total_steps;
  TrainResult& result = s.result;
  result.output_dir = s.out_dir.string();
  result.steps = s.first_step - 1;
  double& val_loss = s.val_loss;
  // Tensor parallelism's own traffic (metrics' comm_bytes_tp).
  const auto tp_group = s.parallel && s.dims.tensor_parallel() ? s.parallel->mesh().group("tp")
                                                               : nullptr;
  for (int64_t step = s.first_step; step <= total_steps; ++step) {
    const auto t0 = Clock::now();
    if (trace) trace->begin_step(step);
    const auto comm_before = comm_mark(s, tp_group);
    if (s.distiller) s.distiller->begin_step();
    const StepOutcome out = train_step(s, step);
    // The step's routing, before an evaluation routes other tokens.
    const std::vector<int64_t> expert_load = s.expert_load ? s.expert_load() : std::vector<int64_t>{};
    const auto step_end = Clock::now();
    // The step's collectives, per kind, for its trace event (what the trace must hold).
    const auto step_comm = trace && trace->active()
                               ? dist::counter_args(model_counters(s) - comm_before.all)
                               : std::vector<dist::TraceArg>{};
    const double step_ms = std::chrono::duration<double, std::milli>(step_end - t0).count();
    // Loss over the global batch and memory over the ranks: one small all-reduce each. A stop
    // signal rides along, so that every rank stops after the same step.
    auto stats = torch::tensor({out.loss_sum / s.steps.accumulation_steps, stop_signal->received() != 0 ? 1.0 : 0.0},
                               torch::kDouble);
    world.group()->all_reduce(stats, dist::ReduceOp::AVG, {"metrics"});
    const double loss = stats[0].item<double>();
    bool stop_now = stats[1].item<double>() > 0;
    FSDPP_CHECK(std::isfinite(loss), "[train] the loss became {} at step {}", loss, step);
    result.final_loss = loss;
    result.steps = step;
    const bool eval_now = s.eval_batches &&
                          ((t.eval_steps > 0 && step % t.eval_steps == 0) || step == total_steps);
    if (eval_now && !stop_now) {
      dist::TraceSpan eval_span(trace.get(), "eval");
      bool stopped = false;
      val_loss = evaluate(s, step, &stopped);
      stop_now = stop_now || stopped;
    }
    if (reporter.due(step, eval_now)) {
      auto report = step_report(s, step, out, loss, step_ms, comm_before, tp_group, expert_load);
      if (eval_now && std::isfinite(val_loss)) report.val_loss = val_loss;
      reporter.report_step(report);
    } else {
      reporter.tick(step, loss, out.lr);
    }
    if (save_due(s, step)) {
      dist::TraceSpan save_span(trace.get(), "checkpoint_save");
      save_checkpoint(s, step);
    }
    reporter.beat(fmt::format("step {} of {}", step, total_steps));
    // The step's event spans what step_ms measures; eval and saves follow it in the trace.
    if (trace) trace->end_step(step, step_end, step_comm);
    if (stop_now) {
      result.stopped_by_signal = stop_signal->received() != 0 ? stop_signal->received() : SIGTERM;
      break;
    }
  }
}

}  // namespace fsdpp::train::detail
