// model.deferred_init (phases.h): where build_model makes the model's parameters, and how the
// parts a rank holds get storage and values once shard_model (or the pipeline's) has sharded them:
// drawn from training.seed (exact or per shard), or left to model.init_from or the checkpoint a
// resume loads. Every rank draws what it keeps and nothing else; no communication.
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "phases.h"

namespace fsdpp::train::detail {

bool deferred_init(const TrainConfig& cfg) { return cfg.model.deferred_init != DeferredInit::OFF; }

at::Device model_build_device(const TrainConfig& cfg) {
  return deferred_init(cfg) ? at::Device(at::kMeta) : at::Device(at::kCPU);
}

at::Device model_device(const TrainSession& s) { return s.world.device(); }

namespace {

// fsdp_sync_module_states under deferred initialisation: rank 0's model is rank 0's plan (its
// seed and each parameter's draw), so every rank takes that plan, broadcast once (a few numbers
// per parameter), and draws its rows of rank 0's model.
InitPlan rank0_plan(InitPlan plan, dist::World& world) {
  const int64_t n = static_cast<int64_t>(plan.params.size());
  auto head = torch::tensor({static_cast<int64_t>(plan.seed), n}, torch::kLong).to(world.device());
  world.group()->broadcast(head, 0, {"sync_module_states"});
  head = head.cpu();
  FSDPP_CHECK_AS(ConfigError, head[1].item<int64_t>() == n,
                 "[train] fsdp_sync_module_states: rank 0's model has {} parameters and rank {}'s {}; "
                 "every rank must build the same model",
                 head[1].item<int64_t>(), world.rank(), n);
  std::vector<double> mine;  // per parameter: fill?, mean, std, value
  for (const auto& p : plan.params) {
    mine.insert(mine.end(), {p.kind == ParamInit::Kind::FILL ? 1.0 : 0.0, p.mean, p.std, p.value});
  }
  auto draws = torch::tensor(mine, torch::kDouble).to(world.device());
  world.group()->broadcast(draws, 0, {"sync_module_states"});
  const auto rank0_draws = draws.cpu().view({n, 4});
  const auto rank0 = rank0_draws.accessor<double, 2>();
  plan.seed = static_cast<uint64_t>(head[0].item<int64_t>());
  for (int64_t i = 0; i < n; ++i) {
    auto& p = plan.params[static_cast<size_t>(i)];
    p.kind = rank0[i][0] != 0 ? ParamInit::Kind::FILL : ParamInit::Kind::NORMAL;
    p.mean = rank0[i][1];
    p.std = rank0[i][2];
    p.value = rank0[i][3];
  }
  return plan;
}

}  // namespace

void materialize_model(TrainSession& s, const std::vector<torch::nn::Module*>& parts) {
  if (!deferred_init(s.cfg)) return;
  to_empty(parts, model_device(s));
  if (s.init) return;  // model.init_from's rows come next
  if (s.resumed) {
    s.say("[train] model.deferred_init: weights from the checkpoint (nothing drawn)");
    return;
  }
  InitPlan plan = s.lm->init_plan();
  if (s.cfg.training.fsdp_config.sync_module_states && s.world.size() > 1) {
    plan = rank0_plan(std::move(plan), s.world);
    s.say("[train] fsdp_sync_module_states: every rank draws rank 0's model (rank 0's seed and draws)");
  }
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
