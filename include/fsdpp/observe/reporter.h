#pragma once
// Where a run reports what it measures: metrics.jsonl, TensorBoard event files, the progress
// line, fsdpp-run's heartbeat, a GPU's memory and MFU, and the run's picture at the end
// (docs/observability.md). Built from its own settings (ReporterOptions, which the trainer fills
// from training.logging_* and report_to) and the world it measures; it knows nothing of the
// trainer. As torchtitan's MetricsProcessor, the loop asks whether a step is due and hands over
// what the step produced; the loop assembles no line itself.
//
//   observe::Reporter reporter(options, world);     // rank 0 opens metrics.jsonl, ...
//   if (reporter.due(step, evaluated)) {
//     reporter.report_step(report);                 // collective: every rank, the same steps
//   } else {
//     reporter.tick(step, loss, lr);
//   }
//   reporter.end_steps();
//   reporter.report_end(last_step);                 // run.svg

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "fsdpp/dist/world.h"
#include "fsdpp/observe/step_report.h"

namespace fsdpp::observe {

struct ReporterOptions {
  std::filesystem::path output_dir;  // metrics.jsonl and run.svg, written by rank 0
  bool resumed = false;  // metrics.jsonl is appended to (the resume kept its earlier lines)
  int64_t first_step = 1;
  int64_t total_steps = 0;
  int64_t logging_steps = 10;  // training.logging_steps
  // training.report_to names tensorboard: event files in tensorboard_dir (training.logging_dir,
  // or <output_dir>/runs), the run's config YAML as their "config" text.
  bool tensorboard = false;
  std::filesystem::path tensorboard_dir;
  std::string config_yaml;
  std::string rate_unit = "tok/s";  // the progress line's throughput; "ex/s" for examples
  // The model's FLOPs per token, for MFU on a GPU; 0: no MFU.
  double flops_per_token = 0;
  // Rank 0, after each metrics.jsonl line and under the same agreement on failure: the
  // trainer's check that no other job has entered output_dir.
  std::function<void()> after_line;
};

class Reporter {
 public:
  // Rank 0 opens metrics.jsonl (emptied unless resumed) and, with tensorboard, a new event file
  // (a session start at first_step when resumed, at 0 otherwise, and the config); every rank
  // writes its first heartbeat; on a GPU with flops_per_token, the device's matrix rate is
  // measured once. Collective over the world.
  Reporter(ReporterOptions options, dist::World& world);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Whether `step` gets a line: every logging_steps, the first and the last step, and a step an
  // evaluation was due after (`evaluated`).
  bool due(int64_t step, bool evaluated) const;
  // A due step: every rank's memory gathered (and a GPU's peaks), the line written to
  // metrics.jsonl and TensorBoard on rank 0 (a failure on any rank stops every rank), the
  // progress line. Collective over the world.
  void report_step(const StepReport& report);
  // Any other step: the progress bar moves.
  void tick(int64_t step, double loss, double lr);
  // fsdpp-run --progress-timeout-s: what this rank is doing ("step 3 of 10").
  void beat(const std::string& what);
  // The steps are over: the progress bar's line ends.
  void end_steps();
  // The run's picture beside metrics.jsonl (run_plot.h), on rank 0 once a step of this run was
  // logged (`last_step` >= first_step); one that cannot be written is a warning.
  void report_end(int64_t last_step);

 private:
  struct Parts;
  ReporterOptions options_;
  dist::World& world_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace fsdpp::observe
