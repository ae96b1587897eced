#pragma once
// What rank 0 shows while training. On a terminal (the launcher's: rank 0 writes to /dev/tty,
// since its stdout is the launcher's pipe) a live bar with step, loss, learning rate, tokens/s
// and ETA, with log lines printed above it; otherwise plain log lines on stdout.

#include <cstdint>
#include <cstdio>
#include <string>

namespace fsdpp::observe::detail {

class Progress {
 public:
  // rate_unit: what the throughput counts per second ("tok/s"; "ex/s" for examples).
  Progress(bool enabled, int64_t total_steps, std::string rate_unit = "tok/s");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A logged step (val_loss NaN when not evaluated).
  void log(int64_t step, double loss, double val_loss, double lr, double grad_norm,
           double tokens_per_s, double step_ms, double peak_rss_mb, double elapsed_s);
  // Any other step: only the bar moves.
  void tick(int64_t step, double loss, double lr, double elapsed_s);
  void finish();

 private:
  void draw(int64_t step, double loss, double lr, double elapsed_s);

  bool enabled_;
  int64_t total_;
  std::FILE* tty_ = nullptr;
  std::string rate_unit_;
  double tokens_per_s_ = 0;
};

}  // namespace fsdpp::observe::detail
