#pragma once
// Learning-rate schedules with linear warmup, as Hugging Face's get_*_schedule_with_warmup.
//
//   const LrSchedule lr = make_lr_schedule(cfg.training, /*total_steps=*/1000);
//   lr.at(step);   // the learning rate of optimizer step `step` (1-based)

#include <cstdint>
#include <string>

namespace fsdpp::train {

struct TrainingSection;  // config.h

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

// The schedule of training:'s keys over `total_steps` optimizer steps: lr_scheduler_type from
// learning_rate down to min_lr_ratio of it, after warmup_steps (or, when that is 0, Hugging
// Face's ceil(warmup_ratio x total_steps)).
LrSchedule make_lr_schedule(const TrainingSection& training, int64_t total_steps);

}  // namespace fsdpp::train
