// The planner's answer: ties within the error band, the simplest of them (plan_answer.h).
#include "fsdpp/estimate/plan_answer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fsdpp/fsdp/strategy_traits.h"

namespace fsdpp {

double error_band(const PlanEntry& e, const Cluster& c) {
  const double unchecked = e.time.ep_comm_s + e.time.experts_s;
  return c.error_band + (e.time.total_s > 0 ? 0.5 * unchecked / e.time.total_s : 0.0);
}

int layout_complexity(const EstimateOptions& o) {
  const bool replicas = traits_of(o.strategy).hybrid &&
                        o.world_size / (o.tensor_parallel * std::max(1, o.pipeline.degree)) > estimate_shard_group(o);
  return (o.tensor_parallel > 1) + (o.pipeline.degree > 1) + (o.expert_parallel > 1) + replicas;
}

PlanAnswer plan_answer(const Plan& plan, const Cluster& c) {
  PlanAnswer a;
  if (plan.fitting.empty()) {
    a.why = "no layout fits";
    return a;
  }
  const PlanEntry& fastest = plan.fitting.front();
  a.band = error_band(fastest, c);
  const double limit = fastest.time.total_s * (1 + a.band);
  for (int i = 0; i < static_cast<int>(plan.fitting.size()); ++i) {
    if (plan.fitting[i].time.total_s <= limit) a.ties.push_back(i);
  }
  // The simplest, then the faster (ties is fastest first, so the first of the simplest).
  a.chosen = *std::min_element(a.ties.begin(), a.ties.end(), [&](int x, int y) {
    return layout_complexity(plan.fitting[x].options) < layout_complexity(plan.fitting[y].options);
  });
  const int band = static_cast<int>(std::lround(100 * a.band));
  if (a.ties.size() == 1) {
    a.why = fmt::format("the fastest; no other layout is within its +-{}%", band);
  } else if (a.chosen == 0) {
    a.why = fmt::format("the fastest, and none of the {} other layouts within its +-{}% is simpler",
                        a.ties.size() - 1, band);
  } else {
    a.why = fmt::format("the simplest of the {} layouts within +-{}% of the fastest ({}, {:.3f} s): a tie "
                        "the model cannot break, so fewer parallel dimensions",
                        a.ties.size(), band, fastest.layout, fastest.time.total_s);
  }
  return a;
}

}  // namespace fsdpp
