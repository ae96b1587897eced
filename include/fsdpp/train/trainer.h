#pragma once
// fsdpp-train's loop: a Llama-style model, sharded by the configured wrap policy and strategy,
// trained with AdamW, warmup + cosine (or linear, constant) schedule, gradient accumulation and
// clipping, evaluated every eval_steps, logged to <output_dir>/metrics.jsonl.

#include <memory>
#include <string>

#include "fsdpp/dist/world.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/hooks.h"

namespace fsdpp::train {

struct TrainResult {
  int64_t steps = 0;
  double final_loss = 0;      // training loss of the last step (mean over the global batch)
  double final_val_loss = 0;  // NaN when there is no validation split
  std::string output_dir;
  std::string sample;         // text generated at the end (empty when sample_tokens == 0)
  // SIGTERM or SIGINT stopped the run after `steps` (checkpoints in flight were finished); 0
  // when it ran to the end. fsdpp-train exits with 128 + this.
  int stopped_by_signal = 0;
};

class Trainer {
 public:
  // `hooks` run at their points of every step (hooks.h); none by default.
  Trainer(TrainConfig config, std::shared_ptr<dist::World> world, TrainerHooks hooks = {});
  ~Trainer();
  TrainResult run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fsdpp::train
