// open_logs (phases.h): where the run reports: timeline traces, metrics.jsonl, TensorBoard,
// fsdpp-run's heartbeat and the progress line; and the stop signal, from here to the end of
// run().
#include <cstdlib>
#include <filesystem>

#include "fsdpp/dist/agree.h"
#include "phases.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {

void open_logs(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  const bool lead = s.lead;
  const auto& out_dir = s.out_dir;
  const auto& resumed = s.resumed;
  const int64_t first_step = s.first_step;
  const int64_t total_steps = s.steps.total_steps;
  // training.profile_steps, else the recorder FSDPP_PROFILE_STEPS gave the World: each rank
  // writes its profiled steps to <output_dir>/traces (docs/observability.md#timeline-traces).
  auto& trace = s.trace = world.trace();
  if (!t.profile_steps.empty()) {
    trace = std::make_shared<dist::TraceRecorder>(
        dist::TraceOptions{world.rank(), t.profile_steps, out_dir / "traces"});
    world.set_trace(trace);
  } else if (trace && std::getenv("FSDPP_TRACE_DIR") == nullptr) {
    trace->set_dir(out_dir / "traces");
  }

  auto& metrics = s.metrics;
  if (lead) metrics.emplace(out_dir / "metrics.jsonl", resumed.has_value());
  // training.report_to: rank 0 writes TensorBoard event files next to metrics.jsonl's lines
  // (docs/observability.md). A session start makes TensorBoard drop what older files in the
  // directory hold from that step on, as truncate_metrics does: all of it for a fresh run, the
  // steps after the checkpoint for a resumed one.
  auto& tensorboard = s.tensorboard;
  if (t.report_to_tensorboard()) {
    dist::agree_on_failure(*world.group(), "opening the TensorBoard event file", [&] {
      if (!lead) return;
      tensorboard.emplace(t.logging_dir.empty() ? out_dir / "runs" : fs::path(t.logging_dir));
      tensorboard->add_session_start(resumed ? first_step : 0);
      tensorboard->add_text("config", "```yaml\n" + cfg.to_yaml() + "```", first_step - 1);
    });
    if (tensorboard) {
      s.say(fmt::format("[train] TensorBoard: {} (open with tensorboard --logdir {})",
                        tensorboard->path().string(), tensorboard->path().parent_path().string()));
    }
  }
  s.stop_signal.emplace();  // SIGTERM/SIGINT: stop after the step in progress
  s.heartbeat.emplace();    // fsdpp-run --progress-timeout-s counts from here
  s.heartbeat->beat(fmt::format("training from step {} of {}", first_step, total_steps));
  s.progress.emplace(lead, total_steps, s.tokens_per_example > 0 ? "tok/s" : "ex/s");
}

}  // namespace fsdpp::train::detail
