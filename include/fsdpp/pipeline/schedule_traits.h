#pragma once
// What each pipeline schedule is, in one table that make_schedule, the unit-time simulation's
// bubble, parallelize (how many stages to cut) and fsdpp-train's checks all read, as
// strategy_traits.h does for FSDP's strategies: a schedule added later is described once.
//
//   const auto& t = pipeline::schedule_traits("ZBVZeroBubble");   // any case, "Schedule" prefix
//   t.stages_per_rank;   // 2: rank r holds stages r and 2p-1-r
//   t.placement;         // StagePlacement::V
//   t.split_backward;    // true: I and W instead of B
//   auto s = t.make(/*ranks=*/4, /*stages_per_rank=*/2, /*microbatches=*/8);   // compute only
//
// Unknown names are a ConfigError listing the known ones.

#include <string>
#include <string_view>

#include "fsdpp/pipeline/schedule.h"
#include "fsdpp/pipeline/schedules.h"

namespace fsdpp::pipeline {

// Where a rank's stages sit: LOOP puts stage s on rank s % p (rank r holds r, r+p, ...); V puts
// rank r's two stages at r (going down) and 2p-1-r (coming back), so the turn needs no message.
enum class StagePlacement { LOOP, V };

struct ScheduleTraits {
  std::string_view name;  // PyTorch's class name without "Schedule": "Interleaved1F1B"
  // Stages per rank when the caller does not choose (1: one stage per rank).
  int stages_per_rank;
  // The caller may choose any number of stages per rank >= 2 (the interleaved, looped
  // schedules); false: exactly stages_per_rank.
  bool any_stages_per_rank;
  StagePlacement placement;
  // Backward is split into I (input gradient) and W (weight gradient), run at different times;
  // what needs it: FSDP stages kept gathered over the step (RuntimeOptions::keep_gathered).
  bool split_backward;
  // The compute actions for p ranks, v stages per rank, m microbatches (add_communication
  // lowers them; make_schedule does both).
  PipelineSchedule (*generate)(int num_ranks, int stages_per_rank, int num_microbatches);

  // stages_per_rank when the caller asks for `requested` (0: the default), checked: a ConfigError
  // naming the schedule when it runs a fixed number and `requested` is another.
  int stages_per_rank_for(int requested) const;
  PipelineSchedule make(int num_ranks, int stages_per_rank, int num_microbatches) const;
};

inline constexpr ScheduleTraits kScheduleTraits[] = {
    //                        v  any v  placement             split  generator
    {"GPipe",                 1, false, StagePlacement::LOOP, false,
     [](int p, int, int m) { return gpipe(p, m); }},
    {"1F1B",                  1, false, StagePlacement::LOOP, false,
     [](int p, int, int m) { return schedule_1f1b(p, m); }},
    {"Interleaved1F1B",       2, true,  StagePlacement::LOOP, false, interleaved_1f1b},
    {"ZBH1",                  1, false, StagePlacement::LOOP, true,
     [](int p, int, int m) { return zb_h1(p, m); }},
    {"InterleavedZeroBubble", 2, true,  StagePlacement::LOOP, true,  interleaved_zero_bubble},
    {"ZBVZeroBubble",         2, false, StagePlacement::V,    true,
     [](int p, int, int m) { return zbv_zero_bubble(p, m); }},
};

// The row of `name` (case, '-', '_' and a leading "Schedule" ignored; "zbv" is ZBVZeroBubble),
// or a ConfigError listing every schedule.
const ScheduleTraits& schedule_traits(std::string_view name);
// The same, or null for a name no row has (a schedule read from CSV).
const ScheduleTraits* find_schedule_traits(std::string_view name);
// "GPipe, 1F1B, ... or ZBVZeroBubble", for messages.
std::string schedule_list();

}  // namespace fsdpp::pipeline
