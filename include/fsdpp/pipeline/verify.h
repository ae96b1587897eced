#pragma once
// The checks a schedule passes before a runtime executes it; the first problem found is thrown as
// an fsdpp::Error naming rank, action index and microbatch, e.g.
//   [pipeline] rank 1, action 3 (RECV_F stage 1 microbatch 2): no rank sends it
//   [pipeline] deadlock: rank 0 waits at action 5 (RECV_B stage 0 microbatch 1), rank 1 at ...
// In order:
//  1. shape: stages and microbatches in range, every stage placed on the rank that lists it;
//  2. counts: per stage, every microbatch forwarded exactly once and backwarded exactly once,
//     either by B or by I and W;
//  3. matching: every SEND has exactly one RECV on the peer's rank (same stage pair, microbatch,
//     direction) and every RECV exactly one SEND;
//  4. order on each rank: a microbatch's F after its input arrived (RECV_F, or the previous
//     stage's F on the same rank), its B/I after its F and after its gradient arrived, its W
//     after its I, a SEND after what it sends was computed, compute of a stage with FSDP actions
//     only between its UNSHARD and RESHARD, REDUCE_GRAD after the stage's last backward;
//  5. no deadlock: the schedule is simulated (fsdpp/pipeline/simulate.h) with sends that do not
//     block and recvs that wait for their send.

#include <optional>
#include <string>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

// The first problem's message, or nothing when the schedule passes.
std::optional<std::string> find_problem(const PipelineSchedule& schedule);

// Throws fsdpp::Error with find_problem's message.
void verify(const PipelineSchedule& schedule);

}  // namespace fsdpp::pipeline
