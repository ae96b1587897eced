#pragma once
// A schedule played out in model time: each rank runs its actions in order, a compute action
// takes its cost, a SEND takes none and does not block, a RECV waits until its SEND has run
// (plus an optional p2p latency). From that: each rank's busy and idle time, the bubble fraction,
// the peak number of microbatches whose activations are held per stage, and a text picture.
//
//   auto sim = pipeline::simulate(pipeline::make_schedule("1F1B", 4, 8));
//   sim.bubble_fraction;        // 3/11 = (p-1)/(m+p-1)
//   std::cout << pipeline::render_timeline(sim);
//
// A schedule that cannot finish throws "[pipeline] deadlock: rank 0 waits at action 5 (...)".

#include <string>
#include <vector>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

// Costs of one rank's whole share of the model; a stage on a rank that holds v stages costs 1/v
// of it, so that schedules with different v are compared for the same model. The default is the
// unit time of the textbook formula (F = B = 1, B split into two halves); paper() is Qi et al.'s
// T_F = T_B = T_W, i.e. a full backward twice a forward.
struct Costs {
  double forward = 1.0;
  double backward = 1.0;         // B
  double backward_input = 0.5;   // I
  double backward_weight = 0.5;  // W
  double p2p = 0.0;              // from a SEND to when its RECV can complete

  static Costs paper() { return Costs{1.0, 2.0, 1.0, 1.0, 0.0}; }
};

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct RankTime {
  std::vector<TimedAction> actions;  // what this rank ran, in order
  double busy = 0;                   // sum of its compute
  double idle = 0;                   // makespan - busy: waiting, including before and after
  int peak_activations = 0;          // microbatches forwarded but not backwarded (B/I), all stages
};

struct Simulation {
  int num_ranks = 0;
  int num_microbatches = 0;
  std::vector<int> stage_to_rank;
  std::vector<RankTime> ranks;
  double makespan = 0;
  double bubble_fraction = 0;           // sum of idle / (ranks * makespan)
  std::vector<int> peak_activations;    // per stage: F done, B/I not yet
};

Simulation simulate(const PipelineSchedule& schedule, const Costs& costs = {});

// The textbook bubble of the schedule's family for the same costs:
//   GPipe, 1F1B            (p-1) / (m + p-1)
//   Interleaved1F1B        (p-1) / (v m + p-1)
//   ZBH1                   (p-1)(F+I-W) / (m(F+I+W) + (p-1)(F+I-W))   (a third of 1F1B's bubble
//                          time when F = I = W)
//   InterleavedZeroBubble  ZBH1's with the bubble time divided by v
// read from the schedule's traits (schedule_traits.h); NaN for the V and for a schedule no row
// describes (read from CSV).
double theoretical_bubble(const PipelineSchedule& schedule, const Costs& costs = {});

// Ranks as rows, time as columns of the shortest compute cost; each cell shows the action running
// (F, B, I, W and the microbatch; upper case for a rank's first stage, lower case for its second,
// alternating after that) or '.' when the rank is idle.
std::string render_timeline(const Simulation& simulation);

}  // namespace fsdpp::pipeline
