// save_due and save_checkpoint (phases.h): when training.save_strategy saves, and the save.
#include "phases.h"

namespace fsdpp::train::detail {

// save_strategy: steps (every save_steps), epoch (every pass over the data), no; unless no,
// the last step is saved too when the run ends (finish.cpp), so that a run always leaves its
// weights.
bool save_due(const TrainSession& s, int64_t step) {
  const auto& t = s.cfg.training;
  const int64_t steps_per_epoch = s.steps_per_epoch;
  if (t.save_strategy == SaveStrategy::STEPS) return t.save_steps > 0 && step % t.save_steps == 0;
  if (t.save_strategy == SaveStrategy::EPOCH) return step % steps_per_epoch == 0;
  return false;
}

void save_checkpoint(TrainSession& s, int64_t step) {
  torch::nn::Module& model = s.lm->module();
  auto& offload = s.offload;
  // distillation.layer_projection's maps travel beside the student's state (layer_projection.h).
  const auto* projections = s.distiller ? s.distiller->projections() : nullptr;
  if (projections && !projections->parameters().empty()) {
    auto* opt = s.cfg.training.save_only_model ? nullptr : s.opt.get();
    s.checkpointer->add_files({{distill::kProjectionFile, projections->serialize(opt)}});
  }
  s.checkpointer->save(step, model, *s.opt, s.batches->state(), s.schedule);
  if (offload) offload->release();  // the save read every state page into the process
  s.last_saved = step;
}

}  // namespace fsdpp::train::detail
