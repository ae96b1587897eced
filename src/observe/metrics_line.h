#pragma once
// metrics.jsonl's line for a logged step (docs/training.md#output): what the step produced and
// every rank's memory; the keys come out sorted, as nlohmann::json keeps them. A GPU's figures
// are added by DeviceMetrics (device_metrics.h).

#include <nlohmann/json.hpp>

#include "fsdpp/observe/step_report.h"
#include "rank_memory.h"

namespace fsdpp::observe::detail {

// tokens_per_s: the step's tokens (or examples) over its time.
double tokens_per_s(const StepReport& report);

nlohmann::json metrics_line(const StepReport& report, const RankMemory& memory, double elapsed_s);

}  // namespace fsdpp::observe::detail
