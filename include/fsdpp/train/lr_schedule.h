#pragma once
// Learning-rate schedules with linear warmup, as Hugging Face's get_*_schedule_with_warmup.

#include <cstdint>
#include <string>

namespace fsdpp::train {

struct LrSchedule {
  std::string type = "cosine";  // cosine | linear | constant
  double base_lr = 3e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;  // the floor cosine and linear decay to, as a fraction of base_lr

  // The learning rate for optimizer step `step` (1-based): step/warmup * base during warmup,
  // then decaying from base to min_lr_ratio * base at total_steps.
  double at(int64_t step) const;
};

}  // namespace fsdpp::train
