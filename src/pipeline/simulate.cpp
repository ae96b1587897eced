#include "fsdpp/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/pipeline/schedule_traits.h"
#include "message_key.h"

namespace fsdpp::pipeline {
namespace {

double cost_of(ActionKind kind, const Costs& c) {
  switch (kind) {
    case ActionKind::F: return c.forward;
    case ActionKind::B: return c.backward;
    case ActionKind::I: return c.backward_input;
    case ActionKind::W: return c.backward_weight;
    default: return 0.0;
  }
}

}  // namespace

Simulation simulate(const PipelineSchedule& s, const Costs& costs) {
  const int p = s.num_ranks;
  FSDPP_CHECK(p >= 1 && static_cast<int>(s.actions.size()) == p,
              "[pipeline] simulate: schedule '{}' has {} ranks and {} action lists", s.name, p,
              s.actions.size());
  Simulation sim;
  sim.num_ranks = p;
  sim.num_microbatches = s.num_microbatches;
  sim.stage_to_rank = s.stage_to_rank;
  sim.ranks.resize(static_cast<size_t>(p));
  std::vector<double> scale(static_cast<size_t>(p), 1.0);  // 1/v: a stage is 1/v of the share
  for (int r = 0; r < p; ++r)
    scale[static_cast<size_t>(r)] = 1.0 / std::max(1, s.stages_per_rank(r));

  // Each rank advances on its own clock until it reaches a RECV whose SEND has not run; the
  // only interaction is send time -> recv time, so visiting the ranks in any order gives the
  // same times. No rank able to move while some are unfinished is a deadlock.
  std::map<detail::MessageKey, double> sent;  // message -> time its SEND ran
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      auto& rt = sim.ranks[static_cast<size_t>(r)];
      double& t = clock[static_cast<size_t>(r)];
      for (size_t& i = next[static_cast<size_t>(r)]; i < list.size(); ++i) {
        const Action& a = list[i];
        double start = t;
        if (is_recv(a.kind)) {
          auto it = sent.find(detail::message_of(a));
          if (it == sent.end()) break;  // blocked
          start = t = std::max(t, it->second + costs.p2p);
        } else if (is_send(a.kind)) {
          sent.try_emplace(detail::message_of(a), t);
        } else if (is_compute(a.kind)) {
          double d = cost_of(a.kind, costs) * scale[static_cast<size_t>(r)];
          t += d;
          rt.busy += d;
        }
        rt.actions.push_back({a, start, t});
        moved = true;
      }
    }
  }
  std::string waits;
  for (int r = 0; r < p; ++r) {
    size_t i = next[static_cast<size_t>(r)];
    const auto& list = s.actions[static_cast<size_t>(r)];
    if (i >= list.size()) continue;
    waits += waits.empty() ? fmt::format("rank {} waits at action {} ({})", r, i, describe(list[i]))
                           : fmt::format(", rank {} at action {} ({})", r, i, describe(list[i]));
  }
  FSDPP_CHECK(waits.empty(),
              "[pipeline] deadlock in schedule '{}': {}; each waits for a send that comes after "
              "another rank's wait",
              s.name, waits);

  sim.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (auto& rt : sim.ranks) {
    rt.idle = sim.makespan - rt.busy;
    idle += rt.idle;
  }
  sim.bubble_fraction = sim.makespan > 0 ? idle / (p * sim.makespan) : 0.0;

  // Activations held: a stage keeps a microbatch's from its F to its B or I. A stage lives on
  // one rank, so its order in that rank's list is its order in time.
  sim.peak_activations.assign(static_cast<size_t>(s.num_stages), 0);
  for (int r = 0; r < p; ++r) {
    std::map<int, int> held;
    int held_on_rank = 0;
    auto& rt = sim.ranks[static_cast<size_t>(r)];
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      if (a.stage < 0 || a.stage >= s.num_stages) continue;
      int delta = a.kind == ActionKind::F ? 1 : is_backward(a.kind) ? -1 : 0;
      if (delta == 0) continue;
      int& h = held[a.stage];
      h += delta;
      held_on_rank += delta;
      auto& peak = sim.peak_activations[static_cast<size_t>(a.stage)];
      peak = std::max(peak, h);
      rt.peak_activations = std::max(rt.peak_activations, held_on_rank);
    }
  }
  return sim;
}

double theoretical_bubble(const PipelineSchedule& s, const Costs& c) {
  const double p = s.num_ranks, m = s.num_microbatches;
  const double v = std::max(1, s.stages_per_rank(0));
  const ScheduleTraits* t = find_schedule_traits(s.name);
  // No closed form for the V (its warm-up depends on the costs) nor for a schedule from CSV.
  if (!t || t->placement == StagePlacement::V) return std::numeric_limits<double>::quiet_NaN();
  if (!t->split_backward) return (p - 1) / (v * m + p - 1);  // GPipe, 1F1B: v = 1
  const double work = c.forward + c.backward_input + c.backward_weight;
  const double bubble = (p - 1) * std::max(0.0, c.forward + c.backward_input - c.backward_weight) / v;
  return bubble / (m * work + bubble);
}

std::string render_timeline(const Simulation& sim) {
  double quantum = std::numeric_limits<double>::infinity();
  for (const auto& rt : sim.ranks)
    for (const auto& ta : rt.actions)
      if (ta.end - ta.start > 1e-12) quantum = std::min(quantum, ta.end - ta.start);
  if (!std::isfinite(quantum)) return "";
  const auto cells = static_cast<size_t>(std::llround(std::ceil(sim.makespan / quantum - 1e-9)));
  const size_t width = fmt::format("{}", std::max(0, sim.num_microbatches - 1)).size() + 1;
  std::string out;
  for (int r = 0; r < sim.num_ranks; ++r) {
    std::vector<int> local;  // this rank's stages, in order: their case in the picture
    for (size_t st = 0; st < sim.stage_to_rank.size(); ++st)
      if (sim.stage_to_rank[st] == r) local.push_back(static_cast<int>(st));
    std::vector<std::string> row(cells, fmt::format("{:<{}}", ".", width));
    for (const auto& ta : sim.ranks[static_cast<size_t>(r)].actions) {
      if (!is_compute(ta.action.kind) || ta.end - ta.start <= 1e-12) continue;
      auto pos = std::find(local.begin(), local.end(), ta.action.stage) - local.begin();
      char letter = kind_name(ta.action.kind)[0];
      if (pos % 2 == 1)
        letter = static_cast<char>(std::tolower(static_cast<unsigned char>(letter)));
      std::string token = fmt::format("{:<{}}", fmt::format("{}{}", letter, ta.action.microbatch),
                                      width);
      auto c0 = static_cast<size_t>(std::llround(ta.start / quantum));
      auto c1 = static_cast<size_t>(std::llround(ta.end / quantum));
      for (size_t c = c0; c < c1 && c < cells; ++c) row[c] = token;
    }
    out += fmt::format("rank {} |", r);
    for (const auto& cell : row) out += " " + cell;
    out += "\n";
  }
  return out;
}

}  // namespace fsdpp::pipeline
