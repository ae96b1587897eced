#include "fsdpp/pipeline/communication.h"

#include <map>

#include "fsdpp/common/error.h"

namespace fsdpp::pipeline {

PipelineSchedule add_communication(const PipelineSchedule& in) {
  PipelineSchedule out = in;
  const int last = in.num_stages - 1;
  for (int r = 0; r < in.num_ranks; ++r) {
    auto& list = out.actions[static_cast<size_t>(r)];
    list.clear();
    for (const Action& a : in.actions[static_cast<size_t>(r)]) {
      FSDPP_CHECK(!is_send(a.kind) && !is_recv(a.kind),
                  "[pipeline] add_communication: rank {} already has {}; it takes a compute-only "
                  "schedule",
                  r, describe(a));
      // The recv goes right before the action that consumes it.
      if (a.kind == ActionKind::F && a.stage > 0 && in.rank_of(a.stage - 1) != r)
        list.push_back({a.stage, ActionKind::RECV_F, a.microbatch});
      if (is_backward(a.kind) && a.stage < last && in.rank_of(a.stage + 1) != r)
        list.push_back({a.stage, ActionKind::RECV_B, a.microbatch});
      list.push_back(a);
      // The send right after the action that produces it.
      if (a.kind == ActionKind::F && a.stage < last && in.rank_of(a.stage + 1) != r)
        list.push_back({a.stage, ActionKind::SEND_F, a.microbatch});
      if (is_backward(a.kind) && a.stage > 0 && in.rank_of(a.stage - 1) != r)
        list.push_back({a.stage, ActionKind::SEND_B, a.microbatch});
    }
  }
  return out;
}

PipelineSchedule add_fsdp_actions(const PipelineSchedule& in) {
  PipelineSchedule out = in;
  for (int r = 0; r < in.num_ranks; ++r) {
    const auto& src = in.actions[static_cast<size_t>(r)];
    std::map<int, size_t> first, last;  // per stage: index of its first / last compute action
    for (size_t i = 0; i < src.size(); ++i) {
      FSDPP_CHECK(!is_stage_wide(src[i].kind),
                  "[pipeline] add_fsdp_actions: rank {} already has {}", r, describe(src[i]));
      if (!is_compute(src[i].kind)) continue;
      first.try_emplace(src[i].stage, i);
      last[src[i].stage] = i;
    }
    auto& list = out.actions[static_cast<size_t>(r)];
    list.clear();
    for (size_t i = 0; i < src.size(); ++i) {
      const Action& a = src[i];
      if (is_compute(a.kind) && first[a.stage] == i) list.push_back({a.stage, ActionKind::UNSHARD});
      list.push_back(a);
      if (is_compute(a.kind) && last[a.stage] == i) {
        list.push_back({a.stage, ActionKind::REDUCE_GRAD});
        list.push_back({a.stage, ActionKind::RESHARD});
      }
    }
  }
  return out;
}

}  // namespace fsdpp::pipeline
