// model.deferred_init (phases.h): where build_model makes the model's parameters, and how the
// parts a rank holds get storage and values once shard_model (or the pipeline's) has sharded them:
// drawn from training.seed (exact or per shard), or left to model.init_from or the checkpoint a
// resume loads. Every rank draws what it keeps and nothing else; no communication.
#include "fsdpp/fsdp/deferred_init.h"
#include "phases.h"

namespace fsdpp::train::detail {

bool deferred_init(const TrainConfig& cfg) { return cfg.model.deferred_init != DeferredInit::OFF; }

at::Device model_build_device(const TrainConfig& cfg) {
  return deferred_init(cfg) ? at::Device(at::kMeta) : at::Device(at::kCPU);
}

at::Device model_device(const TrainSession& s) { return s.world.device(); }

void materialize_model(TrainSession& s, const std::vector<torch::nn::Module*>& parts) {
  if (!deferred_init(s.cfg)) return;
  to_empty(parts, model_device(s));
  if (s.init) return;  // model.init_from's rows come next
  if (s.resumed) {
    s.say("[train] model.deferred_init: weights from the checkpoint (nothing drawn)");
    return;
  }
  const auto& plan = s.lm->init_plan();
  if (s.cfg.model.deferred_init == DeferredInit::PER_SHARD) {
    init_per_shard(parts, plan);
    s.say("[train] model.deferred_init=per_shard: each rank drew its shards' rows (counter-based "
          "values, not one process's)");
  } else {
    init_exact(parts, plan);
    s.say("[train] model.deferred_init=exact: each rank drew its shards' rows of the seed's model");
  }
}

}  // namespace fsdpp::train::detail
