#pragma once
// The picture of a run: its loss and validation curves over the steps, and the memory of every
// rank over the same steps, drawn from metrics.jsonl as one SVG (docs/observability.md#pictures).
// fsdpp-train writes it next to metrics.jsonl at the end of a run; `fsdpp-train plot DIR` draws
// it again from any run directory, an interrupted one included.

#include <filesystem>
#include <string>

namespace fsdpp::observe {

struct RunPlotSummary {
  int64_t points = 0;      // metrics lines drawn
  int64_t val_points = 0;  // of which with a validation loss
  int ranks = 0;           // memory lines (ranks with rss_mb_per_rank), 0 when no line has them
};

// The SVG text for the lines of `metrics_jsonl` (lines that are not whole JSON objects, as the
// last one of a killed run may be, are skipped). `title` heads the picture. Throws Error naming
// the file when it cannot be read or holds no line with a step and a loss.
std::string run_plot_svg(const std::filesystem::path& metrics_jsonl, const std::string& title,
                         RunPlotSummary* summary = nullptr);

// Writes run_plot_svg of DIR/metrics.jsonl to `svg` (default DIR/run.svg) atomically.
RunPlotSummary write_run_plot(const std::filesystem::path& run_dir,
                              const std::filesystem::path& svg = {});

}  // namespace fsdpp::observe
