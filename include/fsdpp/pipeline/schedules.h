#pragma once
// Schedule generators, named after PyTorch's classes in torch.distributed.pipelining. Each
// returns compute actions only (F, B or I+W per stage and microbatch); add_communication
// (fsdpp/pipeline/communication.h) adds the sends and recvs, make_schedule does both.
//
//   auto s = pipeline::make_schedule("1F1B", /*ranks=*/4, /*microbatches=*/8);
//   pipeline::verify(s);                                   // throws, naming rank and action
//
// p ranks, m microbatches, v stages per rank. Every schedule accepts m < p: the ranks simply have
// fewer microbatches to overlap (the bubble grows; nothing hangs; docs/pipeline.md).
//  - GPipe: all forwards, then all backwards; holds m microbatches' activations.
//  - 1F1B: p-1-r forwards of warm-up on rank r, then one forward one backward; holds at most p.
//  - Interleaved1F1B: v stages per rank, stage s on rank s % p (loop placement, as Megatron and
//    PyTorch). Microbatches go in rounds of g = m / max(1, m / p) (PyTorch's rule): m must be a
//    multiple of the number of rounds max(1, m / p), otherwise a ConfigError says so (m <= p
//    and m % p == 0 always work, e.g. p=4: m=9 is refused, m=8, 5 and 3 are accepted).
//  - ZBH1: 1F1B with the backward split into I and W (Qi et al. 2023, "Zero Bubble Pipeline
//    Parallelism"): rank r delays its weight gradients by r microbatches so that the W's fill
//    the tail that 1F1B leaves idle; peak activations as 1F1B.
//  - InterleavedZeroBubble: Interleaved1F1B's placement and rounds with I/W split and the
//    zero-bubble warm-up ((v-1)g + p-1-r forwards), PyTorch's ScheduleInterleavedZeroBubble.
//  - ZBVZeroBubble: ZB-V of Qi et al., PyTorch's ScheduleZBVZeroBubble: two stages per rank in a
//    V (rank r holds stages r and 2p-1-r), I/W split; any m (shaped for max(m, 2p-1)).

#include <string_view>
#include <vector>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

PipelineSchedule gpipe(int num_ranks, int num_microbatches);
PipelineSchedule schedule_1f1b(int num_ranks, int num_microbatches);
PipelineSchedule interleaved_1f1b(int num_ranks, int stages_per_rank, int num_microbatches);
PipelineSchedule zb_h1(int num_ranks, int num_microbatches);
PipelineSchedule interleaved_zero_bubble(int num_ranks, int stages_per_rank,
                                         int num_microbatches);
PipelineSchedule zbv_zero_bubble(int num_ranks, int num_microbatches);

// By name: "GPipe", "1F1B", "Interleaved1F1B", "ZBH1", "InterleavedZeroBubble",
// "ZBVZeroBubble" (PyTorch's
// "Schedule" prefix and case are ignored: "ScheduleGPipe", "zbh1"). stages_per_rank is used by
// the interleaved schedules only (default 2 there). Returns the schedule with communication.
PipelineSchedule make_schedule(std::string_view name, int num_ranks, int num_microbatches,
                               int stages_per_rank = 0);

std::vector<std::string_view> schedule_names();

}  // namespace fsdpp::pipeline
