#include "progress.h"

#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace fsdpp::observe::detail {
namespace {

std::string hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

Progress::Progress(bool enabled, int64_t total_steps, std::string rate_unit)
    : enabled_(enabled), total_(total_steps), rate_unit_(std::move(rate_unit)) {
  if (enabled_ && isatty(fileno(stdout))) {
    tty_ = stdout;
  } else if (enabled_) {
    tty_ = std::fopen("/dev/tty", "w");  // nullptr without a controlling terminal (CI)
  }
}

Progress::~Progress() {
  if (tty_ && tty_ != stdout) std::fclose(tty_);
}

void Progress::draw(int64_t step, double loss, double lr, double elapsed_s) {
  if (!tty_) return;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
  const double eta = elapsed_s / static_cast<double>(step) * static_cast<double>(total_ - step);
  std::fputs(fmt::format("\r\033[K[{}{}] {}/{} loss {:.4f} lr {:.2e} {:.0f} {} ETA {}",
                         std::string(filled, '#'), std::string(kWidth - filled, '.'), step, total_,
                         loss, lr, tokens_per_s_, rate_unit_, hms(eta))
                 .c_str(),
             tty_);
  std::fflush(tty_);
}

void Progress::log(int64_t step, double loss, double val_loss, double lr, double grad_norm,
                   double tokens_per_s, double step_ms, double peak_rss_mb, double elapsed_s) {
  if (!enabled_) return;
  tokens_per_s_ = tokens_per_s;
  const double eta = elapsed_s / static_cast<double>(step) * static_cast<double>(total_ - step);
  std::string line = fmt::format(
      "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | grad_norm {:.3f} | {:.0f} {} | {:.0f} ms/step | "
      "rss {:.0f} MiB | eta {}",
      step, total_, loss, std::isfinite(val_loss) ? fmt::format(" | val_loss {:.4f}", val_loss) : "",
      lr, grad_norm, tokens_per_s, rate_unit_, step_ms, peak_rss_mb, hms(eta));
  if (tty_) {
    std::fputs(("\r\033[K" + line + "\n").c_str(), tty_);
    draw(step, loss, lr, elapsed_s);
  } else {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

void Progress::tick(int64_t step, double loss, double lr, double elapsed_s) {
  if (enabled_) draw(step, loss, lr, elapsed_s);
}

void Progress::finish() {
  if (tty_) {
    std::fputs("\n", tty_);
    std::fflush(tty_);
  }
}

}  // namespace fsdpp::observe::detail
