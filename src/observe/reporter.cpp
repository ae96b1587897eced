#include "fsdpp/observe/reporter.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "device_metrics.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/observe/metrics_log.h"
#include "fsdpp/observe/run_plot.h"
#include "heartbeat.h"
#include "metrics_line.h"
#include "progress.h"
#include "tensorboard.h"

namespace fsdpp::observe {

using Clock = std::chrono::steady_clock;

// What the reporter writes to and measures with; rank 0 alone has the files.
struct Reporter::Parts {
  explicit Parts(bool lead) : lead(lead) {}
  const bool lead;
  std::optional<MetricsLog> metrics;  // rank 0
  std::optional<detail::EventFileWriter> tensorboard;  // rank 0, with options.tensorboard
  std::optional<detail::Heartbeat> heartbeat;  // fsdpp-run --progress-timeout-s counts from here
  std::optional<detail::Progress> progress;
  std::optional<detail::DeviceMetrics> device;  // a GPU's memory and MFU; nothing on the CPU
  Clock::time_point start;

  void say(const std::string& line) const {
    if (!lead) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
};

Reporter::Reporter(ReporterOptions options, dist::World& world)
    : options_(std::move(options)), world_(world),
      parts_(std::make_unique<Parts>(world.rank() == 0)) {
  const auto& o = options_;
  auto& p = *parts_;
  if (p.lead) p.metrics.emplace(o.output_dir / "metrics.jsonl", o.resumed);
  // A session start makes TensorBoard drop what older files in the directory hold from that
  // step on, as a resume's cut of metrics.jsonl does: all of it for a fresh run, the steps
  // after the checkpoint for a resumed one.
  if (o.tensorboard) {
    dist::agree_on_failure(*world.group(), "opening the TensorBoard event file", [&] {
      if (!p.lead) return;
      p.tensorboard.emplace(o.tensorboard_dir);
      p.tensorboard->add_session_start(o.resumed ? o.first_step : 0);
      p.tensorboard->add_text("config", "```yaml\n" + o.config_yaml + "```", o.first_step - 1);
    });
    if (p.tensorboard) {
      p.say(fmt::format("[train] TensorBoard: {} (open with tensorboard --logdir {})",
                        p.tensorboard->path().string(), p.tensorboard->path().parent_path().string()));
    }
  }
  p.heartbeat.emplace();
  p.heartbeat->beat(fmt::format("training from step {} of {}", o.first_step, o.total_steps));
  p.progress.emplace(p.lead, o.total_steps, o.rate_unit);
  p.device.emplace(world.device(), o.flops_per_token);
  if (const auto rate = p.device->describe(); !rate.empty()) p.say(rate);
  p.start = Clock::now();
}

Reporter::~Reporter() = default;

bool Reporter::due(int64_t step, bool evaluated) const {
  const auto& o = options_;
  return step % o.logging_steps == 0 || step == o.first_step || step == o.total_steps || evaluated;
}

void Reporter::report_step(const StepReport& report) {
  auto& p = *parts_;
  auto& group = *world_.group();
  const auto memory = detail::gather_rank_memory(group);
  const double elapsed = p.elapsed_s();
  nlohmann::json line = detail::metrics_line(report, memory, elapsed);
  p.device->add_to(line, detail::tokens_per_s(report), group);
  dist::agree_on_failure(group, "writing metrics.jsonl", [&] {
    if (p.metrics) {
      p.metrics->append(line.dump());
      if (options_.after_line) options_.after_line();
    }
    if (p.tensorboard) p.tensorboard->add_scalars(report.step, detail::tensorboard_scalars(line));
  });
  p.progress->log(report.step, report.loss, report.val_loss.value_or(std::nan("")), report.lr,
                  report.grad_norm, detail::tokens_per_s(report), report.step_ms,
                  memory.peak_max_mb, elapsed);
}

void Reporter::tick(int64_t step, double loss, double lr) {
  parts_->progress->tick(step, loss, lr, parts_->elapsed_s());
}

void Reporter::beat(const std::string& what) { parts_->heartbeat->beat(what); }

void Reporter::end_steps() { parts_->progress->finish(); }

void Reporter::report_end(int64_t last_step) {
  auto& p = *parts_;
  if (!p.metrics || last_step < options_.first_step) return;
  // The run itself has succeeded: a picture that cannot be written is a warning, and
  // `fsdpp-train plot` can draw it later.
  try {
    write_run_plot(options_.output_dir);
  } catch (const std::exception& e) {
    p.say(fmt::format("[train] warning: the run's picture was not written: {}", e.what()));
  }
}

}  // namespace fsdpp::observe
