// train_loop (phases.h): the steps from first_step to total_steps, each followed by the metrics
// all-reduce (which carries the stop signal), evaluation, logging and saves as configured; it
// ends early, after a whole step on every rank, when a signal asks.
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "device_metrics.h"
#include "phases.h"

namespace fsdpp::train::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in MiB: VmHWM the peak resident set so far, VmRSS the current one.
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;
  }
  return 0;
}

}  // namespace

bool stop_requested(TrainSession& s) {
  if (s.world.size() == 1) return s.stop_signal->received() != 0;
  auto flag = torch::tensor({s.stop_signal->received() != 0 ? 1.0 : 0.0}, torch::kDouble);
  s.world.group()->all_reduce(flag, dist::ReduceOp::MAX, {"stop signal"});
  return flag.item<double>() > 0;
}

void train_loop(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  const bool lead = s.lead;
  const auto& out_dir = s.out_dir;
  torch::nn::Module& model = s.lm->module();
  auto& scaler = *s.scaler;
  const auto& trace = s.trace;
  auto& metrics = s.metrics;
  auto& tensorboard = s.tensorboard;
  auto& stop_signal = s.stop_signal;
  auto& progress = s.progress;
  const int64_t first_step = s.first_step;
  const int64_t total_steps = s.steps.total_steps;
  const int64_t accum = s.steps.accumulation_steps;
  const int64_t tokens_per_step = s.steps.tokens_per_step;
  TrainResult& result = s.result;
  result.output_dir = out_dir.string();
  result.steps = first_step - 1;
  const DeviceMetrics device_metrics(s);  // a GPU's memory and MFU; nothing on the CPU
  const auto start = Clock::now();
  double& val_loss = s.val_loss;
  // Pipelined: every mesh dim's traffic (the stages' collectives and their messages on pp).
  auto comm_counters = [&](torch::nn::Module& m) {
    return s.pipelined() ? s.parallel->comm_counters() : fsdpp::comm_counters(m);
  };
  // Tensor parallelism's own traffic (metrics' comm_bytes_tp).
  const auto tp_group = s.parallel && s.dims.tensor_parallel() ? s.parallel->mesh().group("tp")
                                                               : nullptr;
  for (int64_t step = first_step; step <= total_steps; ++step) {
    const auto t0 = Clock::now();
    if (trace) trace->begin_step(step);
    const auto comm_before = comm_counters(model);
    const auto split_before = comm_split(s);
    const uint64_t tp_before = tp_group ? tp_group->counters().total_bytes() : 0;
    if (s.distiller) s.distiller->begin_step();
    const auto [lr, loss_sum, grad_norm, stepped, loss_scale, aux_loss_sum] = train_step(s, step);
    // The step's routing, before an evaluation routes other tokens.
    const std::vector<int64_t> expert_load = s.expert_load ? s.expert_load() : std::vector<int64_t>{};
    const auto step_end = Clock::now();
    // The step's collectives, per kind, for its trace event (what the trace must hold).
    const auto step_comm = trace && trace->active() ? dist::counter_args(comm_counters(model) - comm_before)
                                                    : std::vector<dist::TraceArg>{};
    const double step_ms = std::chrono::duration<double, std::milli>(step_end - t0).count();
    // Loss over the global batch and memory over the ranks: one small all-reduce each. A stop
    // signal rides along, so that every rank stops after the same step.
    auto stats = torch::tensor({loss_sum / accum, stop_signal->received() != 0 ? 1.0 : 0.0},
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
    if (step % t.logging_steps == 0 || step == first_step || step == total_steps || eval_now) {
      // Every rank's (peak, current) resident set: the peak over ranks for the progress line,
      // each rank's current one for the run's picture (run_plot.h).
      auto mine = torch::tensor({status_mb("VmHWM"), status_mb("VmRSS")}, torch::kDouble);
      auto all_rss = torch::empty({world.size() * 2}, torch::kDouble);
      world.group()->all_gather_into_tensor(all_rss, mine, {"metrics"});
      all_rss = all_rss.view({world.size(), 2});
      const auto rss = all_rss.select(1, 0).max();
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      nlohmann::json j;
      j["step"] = step;
      j["loss"] = loss;
      if (eval_now && std::isfinite(val_loss)) j["val_loss"] = val_loss;
      j["lr"] = lr;
      j["grad_norm"] = grad_norm;
      if (t.fp16) {
        j["loss_scale"] = loss_scale;
        j["skipped_steps"] = scaler.skipped_steps();
        j["step_skipped"] = !stepped;
      }
      j["tokens_per_s"] = tokens_per_step / (step_ms / 1000.0);
      j["step_ms"] = step_ms;
      j["peak_rss_mb"] = rss.item<double>();
      for (const auto& [key, column] : {std::pair{"peak_rss_mb_per_rank", 0}, std::pair{"rss_mb_per_rank", 1}}) {
        const auto v = all_rss.select(1, column).contiguous();
        j[key] = std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
      }
      device_metrics.add_to(j, tokens_per_step / (step_ms / 1000.0));
      j["comm_bytes"] = (comm_counters(model) - comm_before).total_bytes();
      const auto split_after = comm_split(s);
      j["comm_bytes_intra"] = split_after.first - split_before.first;
      j["comm_bytes_inter"] = split_after.second - split_before.second;
      if (s.expert_load) {
        // The load-balancing loss is over the global batch already: the same on every rank
        // (pipelined: the last stage's, on every rank of the pp group).
        j["aux_loss"] = aux_loss_sum / accum;
        const auto load = models::summarize_expert_load(expert_load);
        j["expert_load_min"] = load.min;
        j["expert_load_max"] = load.max;
        j["expert_load_cv"] = load.cv;
      }
      // Tensor parallelism's activations and loss, on the tp dim (docs/tensor-parallel.md).
      if (tp_group) j["comm_bytes_tp"] = tp_group->counters().total_bytes() - tp_before;
      if (s.distiller) s.distiller->log_step(j, world);  // kd_loss, ce_loss, the teacher's collectives
      j["elapsed_s"] = elapsed;
      dist::agree_on_failure(*world.group(), "writing metrics.jsonl", [&] {
        if (lead) {
          metrics->append(j.dump());
          s.dir_lock->verify();  // no other job has entered output_dir
        }
        if (tensorboard) tensorboard->add_scalars(step, detail::tensorboard_scalars(j));
      });
      progress->log(step, loss, eval_now ? val_loss : std::nan(""), lr, grad_norm,
                    tokens_per_step / (step_ms / 1000.0), step_ms, rss.item<double>(), elapsed);
    } else {
      progress->tick(step, loss, lr, std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (save_due(s, step)) {
      dist::TraceSpan save_span(trace.get(), "checkpoint_save");
      save_checkpoint(s, step);
    }
    s.heartbeat->beat(fmt::format("step {} of {}", step, total_steps));
    // The step's event spans what step_ms measures; eval and saves follow it in the trace.
    if (trace) trace->end_step(step, step_end, step_comm);
    if (stop_now) {
      result.stopped_by_signal = stop_signal->received() != 0 ? stop_signal->received() : SIGTERM;
      break;
    }
  }
}

}  // namespace fsdpp::train::detail
