#include "fsdpp/pipeline/schedules.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/pipeline/communication.h"
#include "fsdpp/pipeline/schedule_traits.h"

namespace fsdpp::pipeline {
namespace {

void check_sizes(std::string_view name, int p, int v, int m) {
  FSDPP_CHECK_AS(ConfigError, p >= 1, "[pipeline] {} needs at least 1 rank, got {}", name, p);
  FSDPP_CHECK_AS(ConfigError, v >= 1, "[pipeline] {} needs at least 1 stage per rank, got {}",
                 name, v);
  FSDPP_CHECK_AS(ConfigError, m >= 1, "[pipeline] {} needs at least 1 microbatch, got {}", name,
                 m);
}

PipelineSchedule empty(std::string name, int p, int v, int m) {
  PipelineSchedule s;
  s.name = std::move(name);
  s.num_ranks = p;
  s.num_stages = p * v;
  s.num_microbatches = m;
  // Loop placement: stage s on rank s % p, so that rank r holds r, r+p, r+2p, ...
  for (int stage = 0; stage < p * v; ++stage) s.stage_to_rank.push_back(stage % p);
  s.actions.resize(static_cast<size_t>(p));
  return s;
}

// One rank's compute order for the 1F1B family, the shape of PyTorch's _get_1f1b_rank_ops:
// `warmup` forwards, then pairs of one forward and one backward, then the remaining backwards.
// With v stages per rank the forwards visit the rank's stages in rounds of g microbatches
// (g on the first local stage, g on the second, ...) and the backwards in the reverse stage
// order. With zero_bubble the backward is I, and the W of the oldest I follows each I once
// `w_delay` backwards have run; the W's not yet run close the list.
struct RankPlan {
  int rank = 0, p = 1, v = 1, g = 1, m = 1;
  int warmup = 0;
  bool zero_bubble = false;
  int w_delay = 0;
};

std::vector<Action> rank_ops(const RankPlan& plan) {
  const int total = plan.v * plan.m;  // forwards (and backwards) on this rank
  const int warmup = std::clamp(plan.warmup, 0, total);
  const int steady = total - warmup;
  auto forward_stage = [&](int op) { return ((op / plan.g) % plan.v) * plan.p + plan.rank; };
  auto backward_stage = [&](int op) {
    return (plan.v - 1 - ((op - warmup) / plan.g) % plan.v) * plan.p + plan.rank;
  };
  std::map<int, int> next_f, next_b, next_w;  // per stage: the next microbatch
  std::vector<int> backward_ops;              // op index of each backward, in order
  int weights_done = 0;
  std::vector<Action> ops;
  const ActionKind backward = plan.zero_bubble ? ActionKind::I : ActionKind::B;
  auto add_forward = [&](int op) {
    int stage = forward_stage(op);
    ops.push_back({stage, ActionKind::F, next_f[stage]++});
  };
  auto add_backward = [&](int op) {
    int stage = backward_stage(op);
    ops.push_back({stage, backward, next_b[stage]++});
    backward_ops.push_back(op);
    if (plan.zero_bubble && op - warmup >= plan.w_delay) {
      int w_stage = backward_stage(backward_ops[static_cast<size_t>(weights_done++)]);
      ops.push_back({w_stage, ActionKind::W, next_w[w_stage]++});
    }
  };
  for (int op = 0; op < warmup; ++op) add_forward(op);
  for (int op = warmup; op < warmup + steady; ++op) {
    add_forward(op);
    add_backward(op);
  }
  for (int op = warmup + steady; op < total + warmup; ++op) add_backward(op);
  while (plan.zero_bubble && weights_done < static_cast<int>(backward_ops.size())) {
    int w_stage = backward_stage(backward_ops[static_cast<size_t>(weights_done++)]);
    ops.push_back({w_stage, ActionKind::W, next_w[w_stage]++});
  }
  return ops;
}

// PyTorch's rounds for the interleaved schedules: microbatches go through a rank's stages in
// rounds of g = m / max(1, m / p); every round must have the same size.
int round_size(std::string_view name, int p, int m) {
  const int rounds = std::max(1, m / p);
  if (m % rounds != 0) {
    int lower = (m / p) * p;
    FSDPP_THROW(ConfigError,
                "[pipeline] {} with {} ranks cannot split {} microbatches into rounds of equal "
                "size (max(1, m / p) = {} rounds); use m <= {} or a multiple of {} such as {} "
                "or {}",
                name, p, m, rounds, p, p, lower, lower + p);
  }
  return m / rounds;
}

}  // namespace

PipelineSchedule gpipe(int p, int m) {
  check_sizes("GPipe", p, 1, m);
  auto s = empty("GPipe", p, 1, m);
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < m; ++k) s.actions[static_cast<size_t>(r)].push_back({r, ActionKind::F, k});
    for (int k = 0; k < m; ++k) s.actions[static_cast<size_t>(r)].push_back({r, ActionKind::B, k});
  }
  return s;
}

PipelineSchedule schedule_1f1b(int p, int m) {
  check_sizes("1F1B", p, 1, m);
  auto s = empty("1F1B", p, 1, m);
  for (int r = 0; r < p; ++r)
    s.actions[static_cast<size_t>(r)] =
        rank_ops({.rank = r, .p = p, .v = 1, .g = m, .m = m, .warmup = p - 1 - r});
  return s;
}

PipelineSchedule interleaved_1f1b(int p, int v, int m) {
  check_sizes("Interleaved1F1B", p, v, m);
  const int g = round_size("Interleaved1F1B", p, m);
  auto s = empty("Interleaved1F1B", p, v, m);
  // The last rank warms up with its first v-1 rounds; each rank before it needs two more
  // forwards (one for the forward going down, one for the backward coming up).
  for (int r = 0; r < p; ++r)
    s.actions[static_cast<size_t>(r)] = rank_ops(
        {.rank = r, .p = p, .v = v, .g = g, .m = m, .warmup = (v - 1) * g + 2 * (p - 1 - r)});
  return s;
}

PipelineSchedule zb_h1(int p, int m) {
  check_sizes("ZBH1", p, 1, m);
  auto s = empty("ZBH1", p, 1, m);
  for (int r = 0; r < p; ++r)
    s.actions[static_cast<size_t>(r)] = rank_ops({.rank = r, .p = p, .v = 1, .g = m, .m = m,
                                                  .warmup = p - 1 - r, .zero_bubble = true,
                                                  .w_delay = r});
  return s;
}

PipelineSchedule interleaved_zero_bubble(int p, int v, int m) {
  check_sizes("InterleavedZeroBubble", p, v, m);
  const int g = round_size("InterleavedZeroBubble", p, m);
  auto s = empty("InterleavedZeroBubble", p, v, m);
  // I is shorter than a full backward, so one extra forward per hop suffices (PyTorch's
  // multiply_factor 1).
  for (int r = 0; r < p; ++r)
    s.actions[static_cast<size_t>(r)] =
        rank_ops({.rank = r, .p = p, .v = v, .g = g, .m = m, .warmup = (v - 1) * g + (p - 1 - r),
                  .zero_bubble = true, .w_delay = r});
  return s;
}

PipelineSchedule zbv_zero_bubble(int p, int m) {
  check_sizes("ZBVZeroBubble", p, 2, m);
  auto s = empty("ZBVZeroBubble", p, 2, m);
  // V placement: rank r holds stage r going down and stage 2p-1-r coming back, so rank 0 holds
  // the first and the last stage and the turn (stages p-1 and p) is on rank p-1 with no message.
  for (int stage = p; stage < 2 * p; ++stage) s.stage_to_rank[static_cast<size_t>(stage)] =
      2 * p - 1 - stage;
  // The shape of PyTorch's ScheduleZBVZeroBubble, written for n = max(m, 2p-1) microbatches,
  // the fewest that fill the V; with fewer, the actions of the microbatches that do not exist
  // are dropped (the order of the others still respects the data flow, which verify checks).
  const int n = std::max(m, 2 * p - 1);
  for (int r = 0; r < p; ++r) {
    const int down = r, up = 2 * p - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<Action> ops;
    auto add = [&](int stage, ActionKind kind, int& counter) {
      ops.push_back({stage, kind, counter++});
    };
    auto add_iw = [&](int stage, int& counter) {
      ops.push_back({stage, ActionKind::I, counter});
      ops.push_back({stage, ActionKind::W, counter++});
    };
    for (int i = 0; i < 2 * (p - r) - 1; ++i) add(down, ActionKind::F, f0);
    for (int i = 0; i < r; ++i) {
      add(up, ActionKind::F, f1);
      add(down, ActionKind::F, f0);
    }
    for (int i = 0; i < p - r; ++i) {
      add(up, ActionKind::F, f1);
      add_iw(up, b1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(down, ActionKind::F, f0);
      add_iw(down, b0);
      add(up, ActionKind::F, f1);
      add_iw(up, b1);
    }
    // Cool-down: the input gradients first, the weight gradients fill in after.
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) {
      ops.push_back({down, ActionKind::I, b0++});
      ops.push_back({up, ActionKind::I, b1++});
    }
    for (int i = 0; i < p - r; ++i) {
      ops.push_back({down, ActionKind::I, b0++});
      ops.push_back({down, ActionKind::W, w0++});
    }
    while (w1 < b1) ops.push_back({up, ActionKind::W, w1++});
    while (w0 < b0) ops.push_back({down, ActionKind::W, w0++});
    auto& list = s.actions[static_cast<size_t>(r)];
    for (const Action& a : ops)
      if (a.microbatch < m) list.push_back(a);
  }
  return s;
}

std::vector<std::string_view> schedule_names() {
  std::vector<std::string_view> out;
  for (const auto& t : kScheduleTraits) out.push_back(t.name);
  return out;
}

PipelineSchedule make_schedule(std::string_view name, int p, int m, int v) {
  const ScheduleTraits& t = schedule_traits(name);
  return add_communication(t.make(p, t.stages_per_rank_for(v), m));
}

}  // namespace fsdpp::pipeline
