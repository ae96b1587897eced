// Pipeline schedules as action lists (docs/pipeline.md): every generator verifies for p in {2, 4}
// and m in {1, p, 2p, odd}; the verifier names rank, action and microbatch of a broken schedule;
// CSV round trip; the simulated bubble against (p-1)/(m+p-1); activations in flight; the
// runtime's stall check on positions in a store.

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <cmath>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/pipeline/communication.h"
#include "fsdpp/pipeline/csv.h"
#include "fsdpp/pipeline/schedule_traits.h"
#include "fsdpp/pipeline/schedules.h"
#include "fsdpp/pipeline/simulate.h"
#include "fsdpp/pipeline/stall_check.h"
#include "fsdpp/pipeline/verify.h"

namespace pp = fsdpp::pipeline;
using pp::Action;
using pp::ActionKind;

namespace {

std::vector<int> microbatch_counts(int p) { return {1, p, 2 * p, p + 1, 2 * p + 1}; }

// The index of `a` in rank r's list; fails the test when absent.
size_t index_of(const pp::PipelineSchedule& s, int r, Action a) {
  const auto& list = s.actions[static_cast<size_t>(r)];
  auto it = std::find(list.begin(), list.end(), a);
  EXPECT_NE(it, list.end()) << pp::describe(a) << " not on rank " << r;
  return static_cast<size_t>(it - list.begin());
}

std::string problem(const pp::PipelineSchedule& s) {
  auto p = pp::find_problem(s);
  return p ? *p : "";
}

}  // namespace

TEST(PipelineSchedule, ActionTextRoundTrip) {
  for (int k = 0; k <= static_cast<int>(ActionKind::REDUCE_GRAD); ++k) {
    auto kind = static_cast<ActionKind>(k);
    Action a{12, kind, pp::is_stage_wide(kind) ? -1 : 34};
    EXPECT_EQ(pp::parse_action(pp::to_string(a)), a) << pp::to_string(a);
  }
  EXPECT_EQ(pp::to_string({0, ActionKind::F, 1}), "0F1");
  EXPECT_EQ(pp::to_string({3, ActionKind::RECV_B, 12}), "3RECV_B12");
  EXPECT_EQ(pp::to_string({2, ActionKind::UNSHARD, -1}), "2UNSHARD");
  EXPECT_EQ(pp::describe({1, ActionKind::RECV_F, 2}), "RECV_F stage 1 microbatch 2");
  for (const char* bad : {"", "F1", "0X1", "0F", "0F1x", "0UNSHARD3", "0SEND1"})
    EXPECT_THROW(pp::parse_action(bad), fsdpp::Error) << bad;
}

TEST(PipelineSchedule, EveryScheduleVerifies) {
  for (int p : {2, 4}) {
    for (int m : microbatch_counts(p)) {
      for (auto name : pp::schedule_names()) {
        SCOPED_TRACE(fmt::format("{} p={} m={}", name, p, m));
        // The interleaved schedules take PyTorch's rule: rounds of equal size, so m = 2p+1 is
        // refused with a sentence (and m <= p or a multiple of p is accepted).
        bool interleaved = name.starts_with("Interleaved");
        if (interleaved && m % std::max(1, m / p) != 0) {
          EXPECT_THROW(pp::make_schedule(name, p, m), fsdpp::ConfigError);
          continue;
        }
        auto s = pp::make_schedule(name, p, m);
        EXPECT_EQ(problem(s), "");
        EXPECT_EQ(problem(pp::add_fsdp_actions(s)), "");
        // Every microbatch forwarded and backwarded exactly once per stage (also a verifier
        // check; counted here independently).
        std::vector<int> forwards(static_cast<size_t>(s.num_stages)), backwards = forwards;
        for (const auto& list : s.actions)
          for (const Action& a : list) {
            if (a.kind == ActionKind::F) ++forwards[static_cast<size_t>(a.stage)];
            if (a.kind == ActionKind::B || a.kind == ActionKind::W)
              ++backwards[static_cast<size_t>(a.stage)];
          }
        for (int st = 0; st < s.num_stages; ++st) {
          EXPECT_EQ(forwards[static_cast<size_t>(st)], m);
          EXPECT_EQ(backwards[static_cast<size_t>(st)], m);
        }
      }
    }
  }
}

// Beyond the cases above: every size up to p=6, m=13, v=3 either verifies or is refused with a
// ConfigError before any action list exists; none deadlocks.
TEST(PipelineSchedule, EverySizeVerifiesOrIsRefused) {
  int refused = 0, verified = 0;
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 13; ++m)
      for (int v = 1; v <= 3; ++v)
        for (auto name : pp::schedule_names()) {
          // A schedule of a fixed number of stages per rank takes that number only.
          const auto& t = pp::schedule_traits(name);
          if (!t.any_stages_per_rank && v != t.stages_per_rank) continue;
          try {
            auto s = pp::make_schedule(name, p, m, v);
            EXPECT_EQ(problem(s), "") << name << " p=" << p << " m=" << m << " v=" << v;
            ++verified;
          } catch (const fsdpp::ConfigError&) {
            EXPECT_NE(m % std::max(1, m / p), 0) << name << " p=" << p << " m=" << m;
            ++refused;
          }
        }
  EXPECT_GT(verified, 500);
  std::cout << verified << " schedules verified, " << refused << " refused\n";
}

// Each schedule is what its row of the traits table says, read off the action lists it makes:
// stages per rank, where they sit (loop or V) and whether backward is split into I and W.
TEST(PipelineSchedule, TraitsDescribeTheSchedules) {
  EXPECT_EQ(pp::schedule_names().size(), std::size(pp::kScheduleTraits));
  for (const auto& t : pp::kScheduleTraits) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(&pp::schedule_traits(t.name), &t);
    EXPECT_EQ(&pp::schedule_traits("Schedule" + std::string(t.name)), &t);
    for (int v : t.any_stages_per_rank ? std::vector<int>{2, 3} : std::vector<int>{t.stages_per_rank}) {
      const int p = 3, m = 6;
      auto s = pp::make_schedule(t.name, p, m, v);
      EXPECT_EQ(s.num_stages, p * v);
      for (int r = 0; r < p; ++r) EXPECT_EQ(s.stages_per_rank(r), v);
      for (int st = 0; st < s.num_stages; ++st) {
        const int loop = st % p, vee = st < p ? st : 2 * p - 1 - st;
        EXPECT_EQ(s.rank_of(st), t.placement == pp::StagePlacement::V ? vee : loop) << st;
      }
      bool split = false, whole = false;
      for (const auto& list : s.actions) {
        for (const Action& a : list) {
          split = split || a.kind == ActionKind::I || a.kind == ActionKind::W;
          whole = whole || a.kind == ActionKind::B;
        }
      }
      EXPECT_EQ(split, t.split_backward);
      EXPECT_EQ(whole, !t.split_backward);
    }
    if (!t.any_stages_per_rank) {
      try {
        pp::make_schedule(t.name, 2, 2, t.stages_per_rank + 1);
        ADD_FAILURE() << "another number of stages per rank was accepted";
      } catch (const fsdpp::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(fmt::format("runs {} stage", t.stages_per_rank)),
                  std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(&pp::schedule_traits("zbv"), &pp::schedule_traits("ZBVZeroBubble"));
  EXPECT_EQ(pp::find_schedule_traits("csv"), nullptr);
  try {
    pp::schedule_traits("Pipedream");
    ADD_FAILURE() << "an unknown schedule was accepted";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GPipe, 1F1B, Interleaved1F1B, ZBH1, InterleavedZeroBubble "
                                         "or ZBVZeroBubble"),
              std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, InterleavedPlacementAndRounds) {
  auto s = pp::make_schedule("Interleaved1F1B", 4, 8, 3);
  EXPECT_EQ(s.num_stages, 12);
  for (int st = 0; st < 12; ++st) EXPECT_EQ(s.rank_of(st), st % 4);
  EXPECT_EQ(problem(s), "");
  // PyTorch's rule: rounds of equal size; p=4, m=9 has 2 rounds of 4.5.
  try {
    pp::interleaved_1f1b(4, 2, 9);
    ADD_FAILURE() << "m=9 on 4 ranks was accepted";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot split 9 microbatches"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pp::interleaved_zero_bubble(4, 2, 9), fsdpp::ConfigError);
  EXPECT_EQ(problem(pp::make_schedule("Interleaved1F1B", 4, 10, 2)), "");  // 2 rounds of 5
  for (int m : {1, 2, 3, 5, 7, 8, 12, 16})
    EXPECT_EQ(problem(pp::make_schedule("InterleavedZeroBubble", 4, m, 2)), "") << m;
  EXPECT_THROW(pp::make_schedule("Pipedream", 2, 2), fsdpp::ConfigError);
  EXPECT_EQ(pp::make_schedule("ScheduleGPipe", 2, 2).name, "GPipe");
  auto v = pp::make_schedule("ZBV", 4, 8);  // V placement: rank r holds stages r and 7-r
  EXPECT_EQ(v.stage_to_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_THROW(pp::gpipe(2, 0), fsdpp::ConfigError);
}

// The compute orders are PyTorch's: the rows below are what torch 2.11.0's
// _calculate_single_rank_operations of ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble
// (with 1 stage per rank for ZBH1) and ScheduleZBVZeroBubble return for p = 4, idle steps dropped.
// (Checked for p = 1..5 and m = 1..13 when this was written: 218 schedules, all equal.)
TEST(PipelineSchedule, ComputeOrdersArePyTorchs) {
  struct Golden {
    const char* name;
    int p, m;
    const char* csv;
  };
  const Golden goldens[] = {
    {"Interleaved1F1B", 4, 8,
     "0F0,0F1,0F2,0F3,4F0,4F1,4F2,4F3,0F4,0F5,0F6,4B0,0F7,4B1,4F4,4B2,4F5,4B3,4F6,0B0,"
     "4F7,0B1,0B2,0B3,4B4,4B5,4B6,4B7,0B4,0B5,0B6,0B7\n"
     "1F0,1F1,1F2,1F3,5F0,5F1,5F2,5F3,1F4,5B0,1F5,5B1,1F6,5B2,1F7,5B3,5F4,1B0,5F5,1B1,"
     "5F6,1B2,5F7,1B3,5B4,5B5,5B6,5B7,1B4,1B5,1B6,1B7\n"
     "2F0,2F1,2F2,2F3,6F0,6F1,6F2,6B0,6F3,6B1,2F4,6B2,2F5,6B3,2F6,2B0,2F7,2B1,6F4,2B2,"
     "6F5,2B3,6F6,6B4,6F7,6B5,6B6,6B7,2B4,2B5,2B6,2B7\n"
     "3F0,3F1,3F2,3F3,7F0,7B0,7F1,7B1,7F2,7B2,7F3,7B3,3F4,3B0,3F5,3B1,3F6,3B2,3F7,3B3,"
     "7F4,7B4,7F5,7B5,7F6,7B6,7F7,7B7,3B4,3B5,3B6,3B7\n"},
    {"Interleaved1F1B", 4, 3,
     "0F0,0F1,0F2,4F0,4F1,4F2,4B0,4B1,4B2,0B0,0B1,0B2\n"
     "1F0,1F1,1F2,5F0,5F1,5F2,5B0,5B1,5B2,1B0,1B1,1B2\n"
     "2F0,2F1,2F2,6F0,6F1,6F2,6B0,6B1,6B2,2B0,2B1,2B2\n"
     "3F0,3F1,3F2,7F0,7B0,7F1,7B1,7F2,7B2,3B0,3B1,3B2\n"},
    {"InterleavedZeroBubble", 4, 8,
     "0F0,0F1,0F2,0F3,4F0,4F1,4F2,4F3,4I0,4W0,0F4,4I1,4W1,0F5,4I2,4W2,0F6,4I3,4W3,0F7,"
     "0I0,0W0,4F4,0I1,0W1,4F5,0I2,0W2,4F6,0I3,0W3,4F7,4I4,4W4,4I5,4W5,4I6,4W6,4I7,4W7,"
     "0I4,0W4,0I5,0W5,0I6,0W6,0I7,0W7\n"
     "1F0,1F1,1F2,1F3,5F0,5F1,5F2,5I0,5F3,5I1,5W0,1F4,5I2,5W1,1F5,5I3,5W2,1F6,1I0,5W3,"
     "1F7,1I1,1W0,5F4,1I2,1W1,5F5,1I3,1W2,5F6,5I4,1W3,5F7,5I5,5W4,5I6,5W5,5I7,5W6,1I4,"
     "5W7,1I5,1W4,1I6,1W5,1I7,1W6,1W7\n"
     "2F0,2F1,2F2,2F3,6F0,6F1,6I0,6F2,6I1,6F3,6I2,6W0,2F4,6I3,6W1,2F5,2I0,6W2,2F6,2I1,"
     "6W3,2F7,2I2,2W0,6F4,2I3,2W1,6F5,6I4,2W2,6F6,6I5,2W3,6F7,6I6,6W4,6I7,6W5,2I4,6W6,"
     "2I5,6W7,2I6,2W4,2I7,2W5,2W6,2W7\n"
     "3F0,3F1,3F2,3F3,7F0,7I0,7F1,7I1,7F2,7I2,7F3,7I3,7W0,3F4,3I0,7W1,3F5,3I1,7W2,3F6,"
     "3I2,7W3,3F7,3I3,3W0,7F4,7I4,3W1,7F5,7I5,3W2,7F6,7I6,3W3,7F7,7I7,7W4,3I4,7W5,3I5,"
     "7W6,3I6,7W7,3I7,3W4,3W5,3W6,3W7\n"},
    {"ZBH1", 4, 8,
     "0F0,0F1,0F2,0F3,0I0,0W0,0F4,0I1,0W1,0F5,0I2,0W2,0F6,0I3,0W3,0F7,0I4,0W4,0I5,0W5,"
     "0I6,0W6,0I7,0W7\n"
     "1F0,1F1,1F2,1I0,1F3,1I1,1W0,1F4,1I2,1W1,1F5,1I3,1W2,1F6,1I4,1W3,1F7,1I5,1W4,1I6,"
     "1W5,1I7,1W6,1W7\n"
     "2F0,2F1,2I0,2F2,2I1,2F3,2I2,2W0,2F4,2I3,2W1,2F5,2I4,2W2,2F6,2I5,2W3,2F7,2I6,2W4,"
     "2I7,2W5,2W6,2W7\n"
     "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3W0,3F4,3I4,3W1,3F5,3I5,3W2,3F6,3I6,3W3,3F7,3I7,"
     "3W4,3W5,3W6,3W7\n"},
    {"ZBVZeroBubble", 4, 8,
     "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,7I3,7W3,0F7,"
     "0I0,0W0,7F4,7I4,7W4,0I1,0W1,7F5,7I5,7W5,0I2,0W2,7F6,7I6,7W6,0I3,0W3,7F7,7I7,7W7,"
     "0I4,0W4,0I5,0W5,0I6,0W6,0I7,0W7\n"
     "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,6I2,6W2,1F6,1I0,1W0,6F4,"
     "6I3,6W3,1F7,1I1,1W1,6F5,6I4,6W4,1I2,1W2,6F6,6I5,6W5,1I3,1W3,6F7,6I6,6W6,1I4,6I7,"
     "1I5,1W4,1I6,1W5,1I7,1W6,6W7,1W7\n"
     "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,5I1,5W1,2F5,2I0,2W0,5F4,5I2,5W2,2F6,"
     "2I1,2W1,5F5,5I3,5W3,2F7,2I2,2W2,5F6,5I4,5W4,2I3,2W3,5F7,5I5,5W5,2I4,5I6,2I5,5I7,"
     "2I6,2W4,2I7,2W5,5W6,5W7,2W6,2W7\n"
     "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,4I0,4W0,3F4,3I0,3W0,4F4,4I1,4W1,3F5,3I1,3W1,4F5,"
     "4I2,4W2,3F6,3I2,3W2,4F6,4I3,4W3,3F7,3I3,3W3,4F7,4I4,4W4,3I4,4I5,3I5,4I6,3I6,4I7,"
     "3I7,3W4,4W5,4W6,4W7,3W5,3W6,3W7\n"},
    {"ZBVZeroBubble", 4, 3,
     "0F0,0F1,0F2,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,0I0,0W0,0I1,0W1,0I2,0W2\n"
     "1F0,1F1,1F2,6F0,6F1,6I0,6W0,6F2,6I1,6W1,6I2,6W2,1I0,1W0,1I1,1W1,1I2,1W2\n"
     "2F0,2F1,2F2,5F0,5F1,5F2,5I0,5W0,5I1,5W1,2I0,2W0,5I2,5W2,2I1,2W1,2I2,2W2\n"
     "3F0,4F0,3F1,4F1,3F2,4F2,4I0,4W0,3I0,3W0,4I1,4W1,3I1,3W1,4I2,4W2,3I2,3W2\n"},
  };
  for (const auto& g : goldens) {
    std::string name = g.name;
    pp::PipelineSchedule s;
    if (name == "Interleaved1F1B") s = pp::interleaved_1f1b(g.p, 2, g.m);
    if (name == "InterleavedZeroBubble") s = pp::interleaved_zero_bubble(g.p, 2, g.m);
    if (name == "ZBH1") s = pp::zb_h1(g.p, g.m);
    if (name == "ZBVZeroBubble") s = pp::zbv_zero_bubble(g.p, g.m);
    EXPECT_EQ(pp::to_csv(s), g.csv) << name << " p=" << g.p << " m=" << g.m;
  }
}

TEST(PipelineSchedule, OneRankNeedsNoCommunication) {
  for (auto name : pp::schedule_names()) {
    auto s = pp::make_schedule(name, 1, 3);
    for (const Action& a : s.actions[0])
      EXPECT_FALSE(pp::is_send(a.kind) || pp::is_recv(a.kind)) << name;
    EXPECT_EQ(problem(s), "") << name;
  }
}

TEST(PipelineSchedule, VerifierNamesAMissingRecv) {
  auto s = pp::make_schedule("1F1B", 2, 4);
  auto& rank1 = s.actions[1];
  size_t recv = index_of(s, 1, {1, ActionKind::RECV_F, 2});
  rank1.erase(rank1.begin() + static_cast<long>(recv));
  size_t send = index_of(s, 0, {0, ActionKind::SEND_F, 2});
  EXPECT_EQ(problem(s), fmt::format("[pipeline] rank 0, action {} (SEND_F stage 0 microbatch 2): "
                                    "rank 1 never receives it (no RECV_F stage 1 microbatch 2)",
                                    send));
  EXPECT_THROW(pp::verify(s), fsdpp::Error);
}

TEST(PipelineSchedule, VerifierNamesARecvThatNobodySends) {
  auto s = pp::make_schedule("1F1B", 2, 4);
  auto& rank0 = s.actions[0];
  rank0.erase(rank0.begin() + static_cast<long>(index_of(s, 0, {0, ActionKind::SEND_F, 2})));
  size_t recv = index_of(s, 1, {1, ActionKind::RECV_F, 2});
  EXPECT_EQ(problem(s), fmt::format("[pipeline] rank 1, action {} (RECV_F stage 1 microbatch 2): "
                                    "no rank sends it (expected SEND_F stage 0 microbatch 2 on "
                                    "rank 0)",
                                    recv));
}

TEST(PipelineSchedule, VerifierNamesADeadlock) {
  // Two ranks, each receiving before it sends: rank 0 waits for the gradient of a microbatch it
  // has not sent forward yet, rank 1 for that forward.
  pp::PipelineSchedule s;
  s.name = "hand-written";
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_microbatches = 1;
  s.stage_to_rank = {0, 1};
  s.actions = {
      {{0, ActionKind::F, 0}, {0, ActionKind::RECV_B, 0}, {0, ActionKind::SEND_F, 0},
       {0, ActionKind::B, 0}},
      {{1, ActionKind::RECV_F, 0}, {1, ActionKind::F, 0}, {1, ActionKind::B, 0},
       {1, ActionKind::SEND_B, 0}},
  };
  std::string msg = problem(s);
  EXPECT_NE(msg.find("[pipeline] deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 waits at action 1 (RECV_B stage 0 microbatch 0), rank 1 at action 0 "
                     "(RECV_F stage 1 microbatch 0)"),
            std::string::npos)
      << msg;
  EXPECT_THROW(pp::simulate(s), fsdpp::Error);
  // The same actions in a working order pass.
  std::swap(s.actions[0][1], s.actions[0][2]);
  EXPECT_EQ(problem(s), "");
}

TEST(PipelineSchedule, VerifierNamesOrderAndCountMistakes) {
  {  // backward before forward
    auto s = pp::gpipe(1, 2);
    std::swap(s.actions[0][0], s.actions[0][2]);  // B0 first
    EXPECT_EQ(problem(s), "[pipeline] rank 0, action 0 (B stage 0 microbatch 0): microbatch 0 is "
                          "backwarded before it is forwarded on stage 0");
  }
  {  // W before I
    auto s = pp::zb_h1(1, 1);  // F0 I0 W0
    std::swap(s.actions[0][1], s.actions[0][2]);
    EXPECT_EQ(problem(s), "[pipeline] rank 0, action 1 (W stage 0 microbatch 0): the W of "
                          "microbatch 0 comes before its I");
  }
  {  // a microbatch missing on a stage
    auto s = pp::make_schedule("GPipe", 2, 3);
    auto& r1 = s.actions[1];
    r1.erase(std::remove(r1.begin(), r1.end(), Action{1, ActionKind::B, 2}), r1.end());
    EXPECT_EQ(problem(s), "[pipeline] stage 1 (rank 1), microbatch 2: is never backwarded (no B "
                          "or I)");
  }
  {  // a forward twice
    auto s = pp::gpipe(1, 2);
    s.actions[0].insert(s.actions[0].begin() + 1, Action{0, ActionKind::F, 0});
    EXPECT_EQ(problem(s), "[pipeline] rank 0, action 1 (F stage 0 microbatch 0): runs a second "
                          "time");
  }
  {  // compute-only schedule on two ranks: stage 1's input never arrives
    auto s = pp::gpipe(2, 1);
    EXPECT_EQ(problem(s), "[pipeline] rank 0, action 1 (B stage 0 microbatch 0): its output "
                          "gradient has not arrived (no RECV_B stage 0 microbatch 0 before it)");
  }
  {  // an action on the wrong rank
    auto s = pp::make_schedule("1F1B", 2, 2);
    s.actions[0].push_back({1, ActionKind::F, 0});
    EXPECT_NE(problem(s).find("stage 1 lives on rank 1"), std::string::npos) << problem(s);
  }
  {  // FSDP: compute after RESHARD
    auto s = pp::add_fsdp_actions(pp::gpipe(1, 2));
    auto& list = s.actions[0];
    auto reshard = std::find(list.begin(), list.end(), Action{0, ActionKind::RESHARD, -1});
    std::rotate(list.begin() + 2, reshard, reshard + 1);  // UNSHARD F0 RESHARD F1 ...
    EXPECT_NE(problem(s).find("stage 0's parameters are not gathered"), std::string::npos)
        << problem(s);
  }
  {  // FSDP: REDUCE_GRAD before the last backward
    auto s = pp::add_fsdp_actions(pp::gpipe(1, 2));
    auto& list = s.actions[0];
    auto rg = std::find(list.begin(), list.end(), Action{0, ActionKind::REDUCE_GRAD, -1});
    std::rotate(rg - 1, rg, rg + 1);  // REDUCE_GRAD before B1
    EXPECT_NE(problem(s).find("before the weight gradient of microbatch 1"), std::string::npos)
        << problem(s);
  }
}

TEST(PipelineSchedule, FsdpActionsWrapEachStage) {
  auto s = pp::add_fsdp_actions(pp::make_schedule("Interleaved1F1B", 2, 4, 2));
  for (int r = 0; r < 2; ++r) {
    int unshards = 0, reshards = 0, reduces = 0;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      unshards += a.kind == ActionKind::UNSHARD;
      reshards += a.kind == ActionKind::RESHARD;
      reduces += a.kind == ActionKind::REDUCE_GRAD;
    }
    EXPECT_EQ(unshards, 2);
    EXPECT_EQ(reshards, 2);
    EXPECT_EQ(reduces, 2);
  }
  EXPECT_EQ(problem(s), "");
}

TEST(PipelineSchedule, CsvRoundTrip) {
  EXPECT_EQ(pp::to_csv(pp::make_schedule("GPipe", 2, 2)),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
  for (auto name : pp::schedule_names()) {
    for (bool fsdp : {false, true}) {
      auto s = pp::make_schedule(name, 4, 8);
      if (fsdp) s = pp::add_fsdp_actions(s);
      auto back = pp::from_csv(pp::to_csv(s), std::string(name));
      EXPECT_EQ(back.num_ranks, s.num_ranks) << name;
      EXPECT_EQ(back.num_stages, s.num_stages) << name;
      EXPECT_EQ(back.num_microbatches, s.num_microbatches) << name;
      EXPECT_EQ(back.stage_to_rank, s.stage_to_rank) << name;
      EXPECT_EQ(back.actions, s.actions) << name;
      EXPECT_EQ(pp::to_csv(back), pp::to_csv(s)) << name;
      EXPECT_EQ(problem(back), "") << name;
    }
  }
  // Files, spaces and empty cells (PyTorch writes None as an empty cell).
  auto path = ::testing::TempDir() + "pipeline_schedule.csv";
  auto s = pp::make_schedule("ZBH1", 2, 3);
  pp::save_csv(s, path);
  EXPECT_EQ(pp::load_csv(path).actions, s.actions);
  auto spaced = pp::from_csv(" 0F0 ,,0B0\n1F0,, \n");
  EXPECT_EQ(spaced.actions[0], (std::vector<Action>{{0, ActionKind::F, 0}, {0, ActionKind::B, 0}}));
  EXPECT_EQ(spaced.actions[1].size(), 1u);
  EXPECT_EQ(pp::from_csv("0F0,0B0\n\n\n").num_ranks, 1);  // trailing blank lines are not ranks
  // Errors name the line.
  try {
    pp::from_csv("0F0,0B0\n1F0,1Q0\n");
    ADD_FAILURE();
  } catch (const fsdpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("csv line 2 (rank 1)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pp::from_csv("0F0,1F0\n1B0\n"), fsdpp::Error);  // stage 1 in two rows
  EXPECT_THROW(pp::from_csv("0F0\n2F0\n"), fsdpp::Error);      // stage 1 nowhere
  EXPECT_THROW(pp::load_csv("/nonexistent/schedule.csv"), fsdpp::Error);
}

TEST(PipelineSchedule, BubbleOfGPipeAnd1F1BIsTheFormula) {
  for (auto costs : {pp::Costs{}, pp::Costs::paper()}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m = 1; m <= 17; ++m) {
        for (auto name : {"GPipe", "1F1B"}) {
          auto s = pp::make_schedule(name, p, m);
          auto sim = pp::simulate(s, costs);
          double theory = double(p - 1) / (m + p - 1);
          EXPECT_NEAR(sim.bubble_fraction, theory, 1e-12) << name << " p=" << p << " m=" << m;
          EXPECT_NEAR(pp::theoretical_bubble(s, costs), theory, 1e-12);
          EXPECT_NEAR(sim.makespan, (m + p - 1) * (costs.forward + costs.backward), 1e-9);
        }
      }
    }
  }
}

TEST(PipelineSchedule, PointToPointLatencyWidensTheBubble) {
  // GPipe, p = 2, m = 1: F on rank 0, the message, F and B on rank 1, the message, B on rank 0.
  pp::Costs costs;
  costs.p2p = 0.5;
  auto sim = pp::simulate(pp::make_schedule("GPipe", 2, 1), costs);
  EXPECT_DOUBLE_EQ(sim.makespan, 5.0);
  EXPECT_DOUBLE_EQ(sim.ranks[0].busy, 2.0);
  EXPECT_DOUBLE_EQ(sim.ranks[0].idle, 3.0);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 0.6);
}

TEST(PipelineSchedule, ZeroBubbleAndInterleavingShrinkTheBubble) {
  for (auto costs : {pp::Costs{}, pp::Costs::paper()}) {
    for (int p : {2, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE(fmt::format("p={} m={} B={}", p, m, costs.backward));
        double one_f_one_b = pp::simulate(pp::make_schedule("1F1B", p, m), costs).bubble_fraction;
        double zb = pp::simulate(pp::make_schedule("ZBH1", p, m), costs).bubble_fraction;
        double il = pp::simulate(pp::make_schedule("Interleaved1F1B", p, m, 2), costs)
                        .bubble_fraction;
        double izb = pp::simulate(pp::make_schedule("InterleavedZeroBubble", p, m, 2), costs)
                         .bubble_fraction;
        EXPECT_LE(zb, one_f_one_b + 1e-12);
        EXPECT_LE(il, one_f_one_b + 1e-12);
        EXPECT_LE(izb, one_f_one_b + 1e-12);
        double zbv = pp::simulate(pp::make_schedule("ZBVZeroBubble", p, m), costs).bubble_fraction;
        EXPECT_LE(zbv, zb + 1e-12);
        // ZB-H1 reaches the paper's bubble (p-1)(F+I-W) exactly.
        auto s = pp::make_schedule("ZBH1", p, m);
        EXPECT_NEAR(zb, pp::theoretical_bubble(s, costs), 1e-12);
      }
    }
  }
}

TEST(PipelineSchedule, ActivationsInFlight) {
  for (int p : {2, 4}) {
    for (int m : microbatch_counts(p)) {
      SCOPED_TRACE(fmt::format("p={} m={}", p, m));
      auto gpipe = pp::simulate(pp::make_schedule("GPipe", p, m));
      auto ofob = pp::simulate(pp::make_schedule("1F1B", p, m));
      auto zb = pp::simulate(pp::make_schedule("ZBH1", p, m));
      for (int st = 0; st < p; ++st) {
        EXPECT_EQ(gpipe.peak_activations[static_cast<size_t>(st)], m);
        EXPECT_EQ(ofob.peak_activations[static_cast<size_t>(st)], std::min(m, p - st));
        EXPECT_EQ(zb.peak_activations[static_cast<size_t>(st)], std::min(m, p - st));
      }
      // ZB-V holds at most p microbatches' worth on a rank (2p stage-halves), 1F1B's memory.
      auto zbv = pp::simulate(pp::make_schedule("ZBVZeroBubble", p, m));
      for (const auto& rank : zbv.ranks) EXPECT_LE(rank.peak_activations, 2 * std::min(m, p));
    }
  }
}

TEST(PipelineSchedule, RendersATimeline) {
  auto sim = pp::simulate(pp::make_schedule("1F1B", 2, 2), pp::Costs::paper());
  EXPECT_EQ(pp::render_timeline(sim),
            "rank 0 | F0 F1 .  .  B0 B0 .  B1 B1\n"
            "rank 1 | .  F0 B0 B0 F1 B1 B1 .  . \n");
}

// Prints the table and pictures of docs/pipeline.md.
TEST(PipelineSchedule, PrintsBubbleTableAndTimelines) {
  const int p = 4;
  std::cout << "| schedule | m | v | bubble (unit) | theory | bubble (paper costs) | theory | "
               "peak act. stage 0 | peak act. rank 0 / v |\n";
  for (int m : {4, 8, 16}) {
    for (auto name : pp::schedule_names()) {
      auto s = pp::make_schedule(name, p, m);
      auto unit = pp::simulate(s);
      auto paper = pp::simulate(s, pp::Costs::paper());
      const int v = s.stages_per_rank(0);
      std::cout << fmt::format("| {} | {} | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {} | {} |\n",
                               name, m, v, unit.bubble_fraction, pp::theoretical_bubble(s),
                               paper.bubble_fraction,
                               pp::theoretical_bubble(s, pp::Costs::paper()),
                               unit.peak_activations[0],
                               double(unit.ranks[0].peak_activations) / v);
    }
  }
  for (auto name : pp::schedule_names()) {
    auto sim = pp::simulate(pp::make_schedule(name, p, 8), pp::Costs::paper());
    std::string picture = pp::render_timeline(sim);
    EXPECT_NE(picture.find("rank 3 |"), std::string::npos);
    std::cout << name << " p=4 m=8 (F=1, B=2, I=W=1), bubble " << sim.bubble_fraction << "\n"
              << picture << "\n";
  }
}

namespace {

// Polls `check` as a rank stuck since a second ago would, for up to 3 s of reads (each finding
// is returned once it has been read twice, 250 ms apart).
std::optional<std::string> finding_of(pp::StallCheck& check, int64_t step, size_t index) {
  const auto since = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    if (auto f = check.waiting(step, index, since)) return f;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

}  // namespace

// The runtime's stall check (stall_check.h) on positions in a store: a recv whose SEND the peer
// has gone past is "sent and never delivered" (ZBVZeroBubble's hang, before the comm queue's
// fix); ranks waiting on each other are a cycle; a peer that has published nothing (busy) gives
// no finding. Each names the schedule, the step and both ranks' actions.
TEST(PipelineStallCheck, NamesAMessageSentAndNotDeliveredAndACycle) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto s = pp::make_schedule("1F1B", 2, 2);
  const size_t recv = index_of(s, 1, {1, ActionKind::RECV_F, 0});
  const size_t send = index_of(s, 0, {0, ActionKind::SEND_F, 0});
  pp::StallCheck rank1(s, 1, store, "sent", std::chrono::milliseconds(0));
  // Rank 0 has published nothing: busy, not stuck.
  const auto busy = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rank1.waiting(1, recv, busy), std::nullopt);
    std::this_thread::sleep_for(std::chrono::milliseconds(260));
  }
  const std::string past = fmt::format("1 {}", send + 2);
  store->set("sent/0", std::vector<uint8_t>(past.begin(), past.end()));
  const auto sent = finding_of(rank1, 1, recv);
  ASSERT_TRUE(sent.has_value());
  EXPECT_NE(sent->find("schedule '1F1B' (2 ranks, 2 stages, 2 microbatches) is stuck in step 1"),
            std::string::npos) << *sent;
  EXPECT_NE(sent->find(fmt::format("rank 1 waits at action {} (RECV_F stage 1 microbatch 0)", recv)),
            std::string::npos) << *sent;
  EXPECT_NE(sent->find(fmt::format("the message that rank 0 sent at its action {} (SEND_F stage 0 "
                                   "microbatch 0)", send)),
            std::string::npos) << *sent;
  EXPECT_NE(sent->find("lost or held it"), std::string::npos) << *sent;
  rank1.done();

  // Rank 0 waits for a gradient before it sends the activation rank 1 waits for: a cycle that
  // verify() refuses, built by hand.
  pp::PipelineSchedule c = s;
  c.name = "hand-made";
  c.num_microbatches = 1;
  c.actions = {{{0, ActionKind::F, 0}, {0, ActionKind::RECV_B, 0}, {0, ActionKind::SEND_F, 0},
                {0, ActionKind::B, 0}},
               {{1, ActionKind::RECV_F, 0}, {1, ActionKind::F, 0}, {1, ActionKind::B, 0},
                {1, ActionKind::SEND_B, 0}}};
  ASSERT_TRUE(pp::find_problem(c).has_value());
  pp::StallCheck a(c, 0, store, "cycle", std::chrono::milliseconds(0));
  pp::StallCheck b(c, 1, store, "cycle", std::chrono::milliseconds(0));
  const auto since = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(b.waiting(1, 0, since), std::nullopt);  // publishes rank 1's position
  const auto cycle = finding_of(a, 1, 1);
  ASSERT_TRUE(cycle.has_value());
  EXPECT_NE(cycle->find("schedule 'hand-made'"), std::string::npos) << *cycle;
  EXPECT_NE(cycle->find("the ranks wait for each other in a cycle: rank 0 waits at action 1 "
                        "(RECV_B stage 0 microbatch 0)"),
            std::string::npos) << *cycle;
  EXPECT_NE(cycle->find("for rank 1's action 3 (SEND_B stage 1 microbatch 0), and rank 1 waits "
                        "at action 0 (RECV_F stage 1 microbatch 0)"),
            std::string::npos) << *cycle;
  EXPECT_NE(cycle->find("for rank 0's action 2 (SEND_F stage 0 microbatch 0)"), std::string::npos)
      << *cycle;
}
