#pragma once
// Which planned layout to run (fsdpp-plan's answer, and fsdpp-estimate --budget's: one answer from
// one model of memory and time). A prediction is only as good as its cluster's error band, so the
// layouts whose step is within the fastest's band of it are ties, and of those the simplest is
// the answer: the fewest parallel dimensions beside data parallelism (tensor, pipeline, expert,
// replicated shard groups), then the faster.
//
//   const auto plan = fsdpp::plan_layouts(model, base, cluster, 8, 16);
//   const auto answer = fsdpp::plan_answer(plan, cluster);
//   if (answer.chosen >= 0) run(plan.fitting[answer.chosen]);

#include <string>
#include <vector>

#include "fsdpp/estimate/step_time.h"

namespace fsdpp {

// The relative error of one row's prediction: the cluster's band, widened by half the share of
// the step in terms that no measurement behind that band has checked well (expert-parallel
// all-to-alls; a MoE's experts, measured on a CPU only, bench/plan_moe_cpu.py).
double error_band(const PlanEntry& entry, const Cluster& cluster);

// Parallel dimensions beside data parallelism: tensor, pipeline, expert, replicas of shard groups.
int layout_complexity(const EstimateOptions& options);

struct PlanAnswer {
  int chosen = -1;        // into plan.fitting; -1: nothing fits
  std::vector<int> ties;  // within the fastest's band of it, the fastest included, fastest first
  double band = 0;        // the fastest's error band
  std::string why;        // why this one, in a sentence
};

PlanAnswer plan_answer(const Plan& plan, const Cluster& cluster);

}  // namespace fsdpp
