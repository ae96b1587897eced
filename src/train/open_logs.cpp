// open_logs (phases.h): where the run reports: timeline traces, and the Reporter (metrics.jsonl,
// TensorBoard, fsdpp-run's heartbeat, the progress line, a GPU's memory and MFU) built from the
// training section's keys; and the stop signal, from here to the end of run().
#include <cstdlib>
#include <filesystem>

#include "fsdpp/dist/device.h"
#include "phases.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

// The Reporter's settings (fsdpp/observe/reporter.h) from training.logging_steps, report_to and
// logging_dir, and what the run is: its steps, its output directory, its model's FLOPs.
observe::ReporterOptions reporter_options(TrainSession& s) {
  const auto& t = s.cfg.training;
  observe::ReporterOptions o;
  o.output_dir = s.out_dir;
  o.resumed = s.resumed.has_value();
  o.first_step = s.first_step;
  o.total_steps = s.steps.total_steps;
  o.logging_steps = t.logging_steps;
  // training.report_to: rank 0 writes TensorBoard event files next to metrics.jsonl's lines
  // (docs/observability.md).
  o.tensorboard = t.report_to_tensorboard();
  if (o.tensorboard) {
    o.tensorboard_dir = t.logging_dir.empty() ? s.out_dir / "runs" : fs::path(t.logging_dir);
    o.config_yaml = s.cfg.to_yaml();
  }
  o.rate_unit = s.tokens_per_example > 0 ? "tok/s" : "ex/s";
  // MFU is a GPU's figure: the model's FLOPs are estimated only there.
  if (dist::has_device_memory(s.world.device())) o.flops_per_token = s.run_model.flops_per_token(s);
  o.after_line = [&s] { s.dir_lock->verify(); };  // no other job has entered output_dir
  return o;
}

}  // namespace

void open_logs(TrainSession& s) {
  const auto& t = s.cfg.training;
  auto& world = s.world;
  // training.profile_steps, else the recorder FSDPP_PROFILE_STEPS gave the World: each rank
  // writes its profiled steps to <output_dir>/traces (docs/observability.md#timeline-traces).
  auto& trace = s.trace = world.trace();
  if (!t.profile_steps.empty()) {
    trace = std::make_shared<dist::TraceRecorder>(
        dist::TraceOptions{world.rank(), t.profile_steps, s.out_dir / "traces"});
    world.set_trace(trace);
  } else if (trace && std::getenv("FSDPP_TRACE_DIR") == nullptr) {
    trace->set_dir(s.out_dir / "traces");
  }
  s.stop_signal.emplace();  // SIGTERM/SIGINT: stop after the step in progress
  s.reporter.emplace(reporter_options(s), world);
}

}  // namespace fsdpp::train::detail
