#pragma once
// run() for --nnodes > 1: rendezvous with the other launchers, start this node's workers with
// the job's store as their store, and supervise them together with the liveness link, so that a
// failure on any node stops every node.

#include <chrono>

#include "fsdpp/launch/launcher.h"
#include "signal_watch.h"
#include "worker_group.h"

namespace fsdpp::launch {

// How the workers of either kind of run are supervised: --timeout-s bounds their collectives, so a
// worker stopped for twice that is frozen, not slow (its peers should have failed already).
OutputOptions output_options(const LaunchConfig& config);

// Returns run()'s exit code. `config` is validated; `signals` is the launcher's.
int run_multi_node(const LaunchConfig& config, SignalWatch& signals,
                   std::chrono::milliseconds grace);

}  // namespace fsdpp::launch
