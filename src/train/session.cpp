#include "session.h"

#include <cmath>
#include <cstdio>
#include <utility>

namespace fsdpp::train::detail {

TrainSession::TrainSession(TrainConfig& config, std::shared_ptr<dist::World> world,
                           const TrainerHooks& hooks, const RunModel& run_model)
    : cfg(config),
      world_ptr(std::move(world)),
      world(*world_ptr),
      hooks(hooks),
      lead(this->world.rank() == 0),
      run_model(run_model),
      val_loss(std::nan("")) {}

void TrainSession::say(const std::string& line) const {
  if (lead) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

std::string count_of(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

}  // namespace fsdpp::train::detail
