#pragma once
// What a pipeline step measured: every action's start and end on every rank of the pp group,
// and from that the bubble (the part of the ranks' time spent waiting) and a picture.
//
//   auto m = runtime.gather_timeline();          // collective over the pp group
//   m.bubble_fraction;                           // measured, beside theoretical_bubble(schedule)
//   pipeline::write_timeline_svg(m, "docs/pipeline-1f1b.svg");
//
// Times are milliseconds from the step's start, which every rank takes right after one barrier
// over the pp group (so they agree to about a message latency). Busy time is the compute
// actions (F, B, I, W); time in recv waits, sends and FSDP bookkeeping counts as idle.

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

struct MeasuredAction {
  Action action;
  double start_ms = 0;
  double end_ms = 0;
  int64_t bytes = -1;  // RuntimeOptions::memory_probe right after the action (-1: no probe)
};

struct MeasuredRank {
  std::vector<MeasuredAction> actions;  // in execution order
  double busy_ms = 0;                   // sum of F, B, I, W
  double end_ms = 0;                    // when its last action ended
  // With a memory probe: its value at the step's start and the most it rose above that after
  // any action of the step: the activations the rank's stages held at once (with the messages
  // in flight and any other allocation of the step).
  int64_t start_bytes = -1;
  int64_t peak_bytes_above_start = -1;
};

struct MeasuredTimeline {
  std::string schedule;                 // the schedule's name
  int num_microbatches = 0;
  std::vector<int> stage_to_rank;
  std::vector<MeasuredRank> ranks;      // (pp size)
  double makespan_ms = 0;               // the latest end over the ranks
  double bubble_fraction = 0;           // sum of (makespan - busy) / (ranks * makespan)
  std::vector<int> peak_activations;    // per stage: microbatches forwarded, not yet backwarded
  // Mean duration per kind over all ranks, milliseconds (0 when the kind did not run).
  double mean_forward_ms = 0, mean_backward_ms = 0, mean_input_ms = 0, mean_weight_ms = 0;
};

// One rank's actions (in its order) into the summary; `ranks` all of the group's, rank 0 first.
MeasuredTimeline summarize(const PipelineSchedule& schedule, std::vector<MeasuredRank> ranks);

// Per stage, the most microbatches whose activations a schedule holds at once (F done, B or I
// not yet), from the order of the actions alone.
std::vector<int> peak_activations(const PipelineSchedule& schedule);

// A memory probe for RuntimeOptions::memory_probe on CPU: the bytes the C library's malloc has
// handed out and not taken back (mallinfo2: the heap in use plus mmapped chunks), where LibTorch's
// CPU tensors live. Process-wide; differences between two readings are what was allocated in
// between. On CUDA, probe the caching allocator's allocated bytes instead.
int64_t malloc_bytes_in_use();

// An SVG: ranks as rows, each compute action a box over time coloured by kind (F blue, B green,
// I orange, W purple; a rank's later stages in lighter shades), labelled with its microbatch;
// sends and recvs as thin ticks; the bubble fraction in the title.
std::string timeline_svg(const MeasuredTimeline& timeline);
void write_timeline_svg(const MeasuredTimeline& timeline, const std::string& path);

// One line per rank of the same picture in text, one column per `ms_per_column`.
std::string render_measured(const MeasuredTimeline& timeline, double ms_per_column = 0);

}  // namespace fsdpp::pipeline
