#include "fsdpp/train/trainer.h"

#include "phases.h"

namespace fsdpp::train {

struct Trainer::State {
  TrainConfig cfg;
  std::shared_ptr<dist::World> world;
  TrainerHooks hooks;
};

Trainer::Trainer(TrainConfig config, std::shared_ptr<dist::World> world, TrainerHooks hooks)
    : s_(std::make_unique<State>(State{std::move(config), std::move(world), std::move(hooks)})) {
  s_->cfg.validate();
}

Trainer::~Trainer() = default;

TrainResult Trainer::run() {
  const detail::LanguageModels model;  // the model: and data: sections (run_model.h)
  detail::TrainSession s(s_->cfg, s_->world, s_->hooks, model);
  return detail::run_phases(s);
}

// The phases in order (phases.h); each leaves its part of the run in the session, whose members
// live until run() returns. The data and the model are the run model's (run_model.h).
TrainResult detail::run_phases(TrainSession& s) {
  detail::choose_start(s);
  detail::prepare_output_dir(s);
  s.run_model.prepare_data(s);
  s.run_model.build_model(s);
  detail::shard_model(s);
  detail::make_optimizer(s);
  detail::restore(s);
  detail::open_logs(s);
  detail::train_loop(s);
  return detail::finish(s);
}

}  // namespace fsdpp::train
