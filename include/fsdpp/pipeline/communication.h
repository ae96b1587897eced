#pragma once
// Lowering compute-only schedules to what a runtime executes.
//
// add_communication: after each F of stage s whose next stage lives on another rank, a SEND_F of
// stage s, and right before the F of stage s+1 on that rank the matching RECV_F; after each B or
// I of stage s > 0 whose previous stage lives elsewhere, a SEND_B, and before the B/I of stage
// s-1 the RECV_B. Sends go as early as possible and recvs as late as possible; with sends that
// do not block (send_async) this adds no dependency that the compute order did not have, so a
// compute order that respects the data flow cannot deadlock after lowering. Consecutive stages
// on the same rank exchange nothing.
//
// add_fsdp_actions: per stage, UNSHARD right before its first compute action, and after its last
// one REDUCE_GRAD then RESHARD: parameters stay gathered across the microbatches and gradients
// are reduce-scattered once per step (torchtitan's default under PP).

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

PipelineSchedule add_communication(const PipelineSchedule& compute_only);
PipelineSchedule add_fsdp_actions(const PipelineSchedule& schedule);

}  // namespace fsdpp::pipeline
