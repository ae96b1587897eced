#pragma once
// The memory check every run makes before it shards its model (training.skip_memory_check
// skips it): the estimate of the step (memory_check.h) against what this rank can still get, on
// the host or on its GPU, agreed over the world so that every rank stops or none does. fsdpp-train's
// models describe themselves from the config (configured_estimate); train()'s module from the
// units FSDP will make of it (custom_model.cpp). Private to src/train.

#include <functional>

#include "fsdpp/train/memory_check.h"

namespace fsdpp::train::detail {

struct TrainSession;

// `describe` is called on every rank inside the agreement (its errors stop every rank);
// `builds_whole`: the model is still to be built whole in fp32 before it is sharded, on top of
// what is resident now (false when it is built already, or is never built whole).
void check_run_fits(TrainSession& s, const std::function<ConfiguredEstimate()>& describe,
                    bool builds_whole);

}  // namespace fsdpp::train::detail
