#pragma once
// PyTorch's c10d flight recorder, switched off unless the user asks for it.

namespace fsdpp::dist::detail {

// PyTorch 2.11's FlightRecorder::recordWithResetEnabled inserts each process group into a
// std::map before it takes its own lock. Every fsdpp group issues its collectives from its own
// queue thread, so two groups of one process (HYBRID_SHARD's shard and replicate groups, or
// ranks run as threads in the tests) whose first collectives race corrupt that map: a segfault,
// or a Gloo send that never completes. fsdpp keeps its own record of every collective
// (CollectiveTrace, with the module that issued it), so the recorder is set to zero entries
// unless TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE is already set.
//
// The recorder reads its size once, when the first c10d backend records, so this must run
// before any group is created; it sets an environment variable, so it must not run while
// another thread reads the environment. ProcessGroup::create calls it (once per process takes
// effect); a program that starts several ranks as threads calls it before starting them.
void configure_flight_recorder();

}  // namespace fsdpp::dist::detail
