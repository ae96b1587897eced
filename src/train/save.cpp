// save_due and save_checkpoint (phases.h): when training.save_strategy saves, and the save.
#include "phases.h"

namespace fsdpp::train::detail {

// The checkpointer's save_strategy (Checkpointer::save_due).
bool save_due(const TrainSession& s, int64_t step) { return s.checkpointer->save_due(step); }

void save_checkpoint(TrainSession& s, int64_t step) {
  torch::nn::Module& model = s.lm->module();
  auto& offload = s.offload;
  // distillation.layer_projection's maps travel beside the student's state (layer_projection.h).
  const auto* projections = s.distiller ? s.distiller->projections() : nullptr;
  if (projections && !projections->parameters().empty()) {
    auto* opt = s.cfg.training.save_only_model ? nullptr : s.opt.get();
    s.checkpointer->add_files({{distill::kProjectionFile, projections->serialize(opt)}});
  }
  s.checkpointer->save(step, model, *s.opt, s.batches->state(), s.lr_schedule);
  if (offload) offload->release();  // the save read every state page into the process
}

}  // namespace fsdpp::train::detail
