#include "fsdpp/pipeline/verify.h"

#include <array>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/pipeline/simulate.h"
#include "message_key.h"

namespace fsdpp::pipeline {
namespace {

using detail::MessageKey;

std::string at(int rank, size_t index, const Action& a) {
  return fmt::format("[pipeline] rank {}, action {} ({}): ", rank, index, describe(a));
}

std::optional<std::string> check_shape(const PipelineSchedule& s) {
  if (s.num_ranks < 1 || static_cast<int>(s.actions.size()) != s.num_ranks)
    return fmt::format("[pipeline] schedule '{}' has {} ranks and {} action lists; expected one "
                       "list per rank",
                       s.name, s.num_ranks, s.actions.size());
  if (s.num_microbatches < 1)
    return fmt::format("[pipeline] schedule '{}' has {} microbatches; expected at least 1", s.name,
                       s.num_microbatches);
  if (s.num_stages < 1 || static_cast<int>(s.stage_to_rank.size()) != s.num_stages)
    return fmt::format("[pipeline] schedule '{}' has {} stages and {} placements", s.name,
                       s.num_stages, s.stage_to_rank.size());
  for (int st = 0; st < s.num_stages; ++st) {
    int r = s.rank_of(st);
    if (r < 0 || r >= s.num_ranks)
      return fmt::format("[pipeline] stage {} is placed on rank {}, outside 0..{}", st, r,
                         s.num_ranks - 1);
  }
  const int last = s.num_stages - 1;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.stage < 0 || a.stage > last)
        return at(r, i, a) + fmt::format("the schedule has stages 0..{}", last);
      if (is_stage_wide(a.kind) ? a.microbatch != -1
                                : (a.microbatch < 0 || a.microbatch >= s.num_microbatches))
        return at(r, i, a) + fmt::format("the schedule has microbatches 0..{}",
                                         s.num_microbatches - 1);
      if (s.rank_of(a.stage) != r)
        return at(r, i, a) + fmt::format("stage {} lives on rank {}", a.stage, s.rank_of(a.stage));
      if (!is_send(a.kind) && !is_recv(a.kind)) continue;
      const Action peer = detail::peer_of(a);
      if (peer.stage < 0 || peer.stage > last)
        return at(r, i, a) + fmt::format("there is no stage {} to exchange with", peer.stage);
      if (s.rank_of(peer.stage) == r)
        return at(r, i, a) + fmt::format("stage {} is on the same rank; nothing is sent",
                                         peer.stage);
    }
  }
  return std::nullopt;
}

// Every microbatch forwarded once and backwarded once (B, or I and W) on every stage.
std::optional<std::string> check_counts(const PipelineSchedule& s) {
  // (stage, microbatch) -> counts of F, B, I, W, indexed by ActionKind's value
  static_assert(static_cast<int>(ActionKind::F) == 0 && static_cast<int>(ActionKind::B) == 1 &&
                static_cast<int>(ActionKind::I) == 2 && static_cast<int>(ActionKind::W) == 3);
  std::map<std::pair<int, int>, std::array<int, 4>> counts;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (!is_compute(a.kind)) continue;
      int& n = counts[{a.stage, a.microbatch}][static_cast<size_t>(a.kind)];
      if (++n > 1) return at(r, i, a) + "runs a second time";
      auto& c = counts[{a.stage, a.microbatch}];
      if (c[1] > 0 && (c[2] > 0 || c[3] > 0))
        return at(r, i, a) + "the microbatch has both a full backward (B) and a split one (I/W)";
    }
  }
  for (int st = 0; st < s.num_stages; ++st) {
    for (int k = 0; k < s.num_microbatches; ++k) {
      auto c = counts[{st, k}];
      std::string where =
          fmt::format("[pipeline] stage {} (rank {}), microbatch {}: ", st, s.rank_of(st), k);
      if (c[0] == 0) return where + "is never forwarded (no F)";
      if (c[1] == 0 && c[2] == 0) return where + "is never backwarded (no B or I)";
      if (c[2] == 1 && c[3] == 0) return where + "has its I but no W";
      if (c[3] == 1 && c[2] == 0) return where + "has a W but no I";
    }
  }
  return std::nullopt;
}

struct Site {
  int rank;
  size_t index;
  Action action;
};

std::optional<std::string> check_matching(const PipelineSchedule& s) {
  std::map<MessageKey, std::vector<Site>> sends, recvs;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (is_send(a.kind)) sends[detail::message_of(a)].push_back({r, i, a});
      if (is_recv(a.kind)) recvs[detail::message_of(a)].push_back({r, i, a});
    }
  }
  for (const auto& [key, sites] : sends) {
    const Site& first = sites.front();
    if (sites.size() > 1)
      return at(sites[1].rank, sites[1].index, sites[1].action) +
             fmt::format("sent a second time (first at action {})", first.index);
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      Action peer = detail::peer_of(first.action);
      return at(first.rank, first.index, first.action) +
             fmt::format("rank {} never receives it (no {})", s.rank_of(peer.stage),
                         describe(peer));
    }
  }
  for (const auto& [key, sites] : recvs) {
    const Site& first = sites.front();
    if (sites.size() > 1)
      return at(sites[1].rank, sites[1].index, sites[1].action) +
             fmt::format("received a second time (first at action {})", first.index);
    if (!sends.contains(key)) {
      Action peer = detail::peer_of(first.action);
      return at(first.rank, first.index, first.action) +
             fmt::format("no rank sends it (expected {} on rank {})", describe(peer),
                         s.rank_of(peer.stage));
    }
  }
  return std::nullopt;
}

// Data flow within each rank's list.
std::optional<std::string> check_order(const PipelineSchedule& s) {
  const int last = s.num_stages - 1;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    // (kind, stage, microbatch) of what has run on this rank so far.
    std::set<std::tuple<ActionKind, int, int>> done;
    auto ran = [&](ActionKind k, int stage, int mb) { return done.contains({k, stage, mb}); };
    auto backwarded = [&](int stage, int mb) {
      return ran(ActionKind::B, stage, mb) || ran(ActionKind::I, stage, mb);
    };
    std::set<int> fsdp_stages;  // stages that have FSDP actions: compute needs UNSHARD
    for (const Action& a : list)
      if (a.kind == ActionKind::UNSHARD) fsdp_stages.insert(a.stage);
    std::set<int> unsharded;
    std::map<int, int> weight_grads_done;  // per stage: microbatches whose B or W ran
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const int st = a.stage, k = a.microbatch;
      if (is_compute(a.kind) && fsdp_stages.contains(st) && !unsharded.contains(st))
        return at(r, i, a) + fmt::format("stage {}'s parameters are not gathered here (no "
                                         "UNSHARD since its last RESHARD)",
                                         st);
      switch (a.kind) {
        case ActionKind::F:
          if (st > 0 && s.rank_of(st - 1) == r && !ran(ActionKind::F, st - 1, k))
            return at(r, i, a) + fmt::format("its input, F stage {} microbatch {} on this rank, "
                                             "has not run yet",
                                             st - 1, k);
          if (st > 0 && s.rank_of(st - 1) != r && !ran(ActionKind::RECV_F, st, k))
            return at(r, i, a) + fmt::format("its input has not arrived (no RECV_F stage {} "
                                             "microbatch {} before it)",
                                             st, k);
          break;
        case ActionKind::B:
        case ActionKind::I:
          if (!ran(ActionKind::F, st, k))
            return at(r, i, a) + fmt::format("microbatch {} is backwarded before it is "
                                             "forwarded on stage {}",
                                             k, st);
          if (st < last && s.rank_of(st + 1) == r && !backwarded(st + 1, k))
            return at(r, i, a) + fmt::format("its output gradient, from the backward of stage {} "
                                             "microbatch {} on this rank, is not computed yet",
                                             st + 1, k);
          if (st < last && s.rank_of(st + 1) != r && !ran(ActionKind::RECV_B, st, k))
            return at(r, i, a) + fmt::format("its output gradient has not arrived (no RECV_B "
                                             "stage {} microbatch {} before it)",
                                             st, k);
          break;
        case ActionKind::W:
          if (!ran(ActionKind::I, st, k))
            return at(r, i, a) + fmt::format("the W of microbatch {} comes before its I", k);
          break;
        case ActionKind::SEND_F:
          if (!ran(ActionKind::F, st, k))
            return at(r, i, a) + fmt::format("sends microbatch {} before F stage {} computed it",
                                             k, st);
          break;
        case ActionKind::SEND_B:
          if (!backwarded(st, k))
            return at(r, i, a) + fmt::format("sends the gradient of microbatch {} before the "
                                             "backward of stage {} computed it",
                                             k, st);
          break;
        case ActionKind::UNSHARD: unsharded.insert(st); break;
        case ActionKind::RESHARD: unsharded.erase(st); break;
        case ActionKind::REDUCE_GRAD:
          for (int mb = 0; mb < s.num_microbatches; ++mb)
            if (!ran(ActionKind::B, st, mb) && !ran(ActionKind::W, st, mb))
              return at(r, i, a) + fmt::format("comes before the weight gradient of microbatch "
                                               "{} (no B or W of it yet)",
                                               mb);
          break;
        default: break;
      }
      done.insert({a.kind, st, k});
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_problem(const PipelineSchedule& s) {
  for (auto check : {check_shape, check_counts, check_matching, check_order})
    if (auto problem = check(s)) return problem;
  try {
    simulate(s, Costs{1.0, 1.0, 1.0, 1.0, 0.0});  // unit time per action
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

void verify(const PipelineSchedule& s) {
  if (auto problem = find_problem(s)) throw Error(*problem);
}

}  // namespace fsdpp::pipeline
