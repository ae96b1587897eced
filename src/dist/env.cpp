#include "fsdpp/dist/env.h"

// The variables come from the launch environments' table (fsdpp/common/launch_env.h): fsdpp-run,
// torchrun, mpirun, srun, Kubeflow, or RANK/WORLD_SIZE set by hand.

#include "fsdpp/common/error.h"
#include "fsdpp/common/launch_env.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp::dist {

DistEnv DistEnv::from_lookup(
    const std::function<std::optional<std::string>(std::string_view)>& get) {
  DistEnv env;
  if (auto t = get("FSDPP_TIMEOUT_S")) {
    const auto s = parse_whole_number(*t);
    FSDPP_CHECK_AS(ConfigError, s && *s >= 1 && *s <= 24 * 3600,
                   "[dist] environment variable FSDPP_TIMEOUT_S='{}' is not whole seconds in [1, 86400]",
                   *t);
    env.timeout = std::chrono::seconds(*s);
  }
  const auto placed = detect_process(get, "dist");
  if (!placed) return env;  // not launched: one process
  env.launched = true;
  env.rank = placed->rank;
  env.world_size = placed->world_size;
  env.local_rank = placed->local_rank;
  env.local_world_size = placed->local_world_size;
  env.master_addr = placed->master_addr.value;
  env.master_port = placed->master_port.value;
  if (auto v = get("FSDPP_AGENT_STORE")) env.agent_store = (*v == "1");
  return env;
}

DistEnv DistEnv::from_env() { return from_lookup(process_environment()); }

}  // namespace fsdpp::dist
