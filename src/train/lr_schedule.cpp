#include "fsdpp/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fsdpp/common/error.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return base_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  if (type == "constant") return base_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  double factor;
  if (type == "cosine") {
    factor = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  } else if (type == "linear") {
    factor = 1.0 - progress;
  } else {
    FSDPP_THROW(ConfigError, "[train] unknown lr schedule '{}'; expected cosine, linear or constant",
                type);
  }
  return base_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * factor);
}

LrSchedule make_lr_schedule(const TrainingSection& t, int64_t total_steps) {
  // Hugging Face's TrainingArguments.get_warmup_steps: warmup_steps if > 0, else
  // ceil(warmup_ratio x total steps).
  const int64_t warmup = t.warmup_steps > 0 ? t.warmup_steps
                                            : static_cast<int64_t>(std::ceil(t.warmup_ratio * static_cast<double>(total_steps)));
  return LrSchedule{std::string(t.lr_scheduler_type.name()), t.learning_rate, warmup, total_steps, t.min_lr_ratio};
}

}  // namespace fsdpp::train
