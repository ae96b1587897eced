#pragma once
// How many times the launcher has restarted this job: a restarted job resumes from the newest
// checkpoint of its output_dir by itself (docs/faults.md).

namespace fsdpp::train::detail {

// FSDPP_RESTART_COUNT (fsdpp-run sets it: 0 on the first attempt, then 1, 2, ...), else
// TORCHELASTIC_RESTART_COUNT (torchrun's), else 0. Throws ConfigError for a value that is not a
// whole number >= 0.
int restart_count_from_env();

}  // namespace fsdpp::train::detail
