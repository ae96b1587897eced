// check_run_fits: the memory check before sharding. See fits_check.h.
#include "fits_check.h"

#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "session.h"

namespace fsdpp::train::detail {

void check_run_fits(TrainSession& s, const std::function<ConfiguredEstimate()>& describe,
                    bool builds_whole) {
  if (s.cfg.training.skip_memory_check) return;
  auto& world = s.world;
  // The host's memory is the device's on CPU; on a GPU the device's free memory.
  const int local = world.env().local_world_size;
  dist::agree_on_failure(*world.group(), "checking that the run fits in memory", [&] {
    const auto ce = describe();
    if (!ce.skip.empty()) {
      s.say("[train] memory check: skipped (" + ce.skip + ")");
      return;
    }
    for (const auto& note : ce.notes) s.say("[train] memory check: " + note);
    if (!world.device().is_cpu()) {
      auto o = ce.options;
      o.device_is_gpu = true;
      const auto m = dist::device_memory(world.device());
      check_device_memory_fits(estimate_memory(ce.model, o), m.free, m.total, world.device().str());
      return;
    }
    check_memory_fits(estimate_memory(ce.model, ce.options),
                      builds_whole ? ce.model.num_params() * 4 : 0, local);
  });
}

}  // namespace fsdpp::train::detail
