// Ranks that issue different collectives: the error names the first difference (index, ranks,
// operation, shape, dtype, module) instead of a bare timeout. Ranks as threads over a HashStore.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../src/dist/collective_trace.h"
#include "../support/thread_world.h"
#include "fsdpp/common/error.h"

#include <fmt/ranges.h>

using namespace fsdpp;
using dist::detail::CollectiveTrace;
using dist::detail::RankTrace;
using Clock = std::chrono::steady_clock;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

RankTrace trace_of(int rank, CollectiveTrace& t, uint64_t waiting) {
  return RankTrace{rank, waiting, t.recent()};
}

// Runs `fn` on 2 thread ranks with a collective timeout of `timeout`; returns each rank's error
// message ("" when it threw none) and the seconds until the last rank finished.
struct Outcome {
  std::string message[2];
  double seconds = 0;
};
Outcome run_two(std::chrono::milliseconds timeout, const std::function<void(dist::World&)>& fn) {
  Outcome o;
  const auto t0 = Clock::now();
  test::run_ranks(
      2,
      [&](dist::World& w) {
        try {
          fn(w);
        } catch (const fsdpp::Error& e) {
          o.message[w.rank()] = e.what();
        }
      },
      timeout);
  o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return o;
}

class CheckModeEnv {
 public:
  CheckModeEnv() { setenv("FSDPP_COLLECTIVE_CHECK", "1", 1); }
  ~CheckModeEnv() { unsetenv("FSDPP_COLLECTIVE_CHECK"); }
};

}  // namespace

TEST(CollectiveTrace, RunningHashAgreesOnlyOnEqualSequences) {
  CollectiveTrace a("g"), b("g"), c("other");
  for (auto* t : {&a, &b, &c}) t->record("all_gather", "[4]", "Float", "layers.0");
  EXPECT_EQ(a.recent().back().hash, b.recent().back().hash);
  EXPECT_NE(a.recent().back().hash, c.recent().back().hash);  // the group is part of it
  a.record("all_gather", "[4]", "Float", "layers.1");
  b.record("all_gather", "[4]", "Float", "layers.2");
  a.record("barrier", "", "", "");
  b.record("barrier", "", "", "");
  // Equal calls after a difference still differ: the hash runs over the whole sequence.
  EXPECT_NE(a.recent().back().hash, b.recent().back().hash);
  const auto d = dist::detail::first_divergence("g", {trace_of(0, a, 3), trace_of(1, b, 3)});
  ASSERT_TRUE(d);
  EXPECT_TRUE(has(*d, "the ranks disagree at collective #2")) << *d;
  EXPECT_TRUE(has(*d, "rank 0 issued all_gather of [4] Float for module 'layers.1'")) << *d;
  EXPECT_TRUE(has(*d, "rank 1 issued all_gather of [4] Float for module 'layers.2'")) << *d;
  EXPECT_TRUE(has(*d, "collectives #1 to #1 agree")) << *d;
}

TEST(CollectiveTrace, AgreeingPrefixesAreNoDivergence) {
  CollectiveTrace a("g"), b("g");
  for (int i = 0; i < 5; ++i) a.record("all_reduce(SUM)", "[1]", "Float", "x");
  for (int i = 0; i < 3; ++i) b.record("all_reduce(SUM)", "[1]", "Float", "x");
  EXPECT_FALSE(dist::detail::first_divergence("g", {trace_of(0, a, 5), trace_of(1, b, 3)}));
  const std::string p = dist::detail::describe_progress({trace_of(1, b, 3), trace_of(0, a, 5)});
  EXPECT_TRUE(has(p, "rank 0 is waiting on #5")) << p;
  EXPECT_TRUE(has(p, "rank 1 is waiting on #3")) << p;
}

TEST(CollectiveTrace, ThreeRanksAreGroupedBySide) {
  CollectiveTrace t[3] = {CollectiveTrace("g"), CollectiveTrace("g"), CollectiveTrace("g")};
  for (int r = 0; r < 3; ++r) {
    t[r].record("broadcast(root 0)", "[2, 3]", "Float", "sync");
    t[r].record(r == 1 ? "all_reduce(MAX)" : "all_reduce(SUM)", "[1]", "Long", "state_dict");
  }
  const auto d = dist::detail::first_divergence(
      "g", {trace_of(0, t[0], 2), trace_of(1, t[1], 2), trace_of(2, t[2], 2)});
  ASSERT_TRUE(d);
  EXPECT_TRUE(has(*d, "ranks 0, 2 issued all_reduce(SUM) of [1] Long for module 'state_dict'")) << *d;
  EXPECT_TRUE(has(*d, "rank 1 issued all_reduce(MAX) of [1] Long")) << *d;
}

TEST(CollectiveTrace, OnlyTheLastRecordsAreKeptAndSerializationRoundTrips) {
  CollectiveTrace a("g");
  for (size_t i = 0; i < dist::detail::kTraceCapacity + 10; ++i) a.record("barrier", "", "", "");
  const auto recent = a.recent();
  ASSERT_EQ(recent.size(), dist::detail::kTraceCapacity);
  EXPECT_EQ(recent.front().seq, 11u);
  EXPECT_EQ(a.issued(), dist::detail::kTraceCapacity + 10);
  const RankTrace t{3, 7, recent};
  const auto back = RankTrace::parse(t.serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->waiting, 7u);
  ASSERT_EQ(back->records.size(), recent.size());
  EXPECT_EQ(back->records.back().hash, recent.back().hash);
  EXPECT_FALSE(RankTrace::parse("not json"));
  EXPECT_FALSE(RankTrace::parse("{\"rank\": 1}"));
}

// What the default mode costs per collective: one record (and the shape text for it).
TEST(CollectiveTrace, RecordingIsCheap) {
  CollectiveTrace t("default");
  const auto input = torch::empty({4096, 128});
  constexpr int kN = 100000;
  const auto t0 = Clock::now();
  for (int i = 0; i < kN; ++i) {
    t.record("all_gather", fmt::format("[{}]", fmt::join(input.sizes(), ", ")),
             c10::toString(input.scalar_type()), "layers.17");
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kN;
  std::printf("[ measured ] recording one collective: %.2f us\n", us);
  EXPECT_LT(us, 50.0);  // a 4 KB Gloo all-reduce takes about 500 us here
}

// Rank 1 skips unit 'layers.1': its all_gather for 'layers.2' pairs with rank 0's for
// 'layers.1' (same size, so the backend cannot tell), and the next collective stalls. Both
// ranks name the first difference, seconds before the timeout.
TEST(CollectiveMismatch, SkippedUnitIsNamedBeforeTheTimeout) {
  const auto o = run_two(std::chrono::seconds(20), [](dist::World& w) {
    auto g = w.new_group({0, 1}, "skip");
    auto in = torch::ones({4});
    auto out = torch::empty({8});
    g->all_gather_into_tensor(out, in, {"layers.0"});
    if (w.rank() == 0) g->all_gather_into_tensor(out, in, {"layers.1"});
    g->all_gather_into_tensor(out, in, {"layers.2"});
    g->barrier({"step"});
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = o.message[r];
    EXPECT_TRUE(has(m, "collective mismatch in group 'skip'")) << m;
    EXPECT_TRUE(has(m, "the ranks disagree at collective #2")) << m;
    EXPECT_TRUE(has(m, "rank 0 issued all_gather of [4] Float for module 'layers.1'")) << m;
    EXPECT_TRUE(has(m, "rank 1 issued all_gather of [4] Float for module 'layers.2'")) << m;
    EXPECT_TRUE(has(m, fmt::format("Seen by rank {}", r))) << m;
  }
  std::printf("[ measured ] skipped unit named after %.2f s (timeout 20 s)\n", o.seconds);
  EXPECT_LT(o.seconds, 12.0);
}

// Collectives in another order: each rank waits on a different kind of collective.
TEST(CollectiveMismatch, ReorderedCollectivesAreNamed) {
  const auto o = run_two(std::chrono::seconds(20), [](dist::World& w) {
    auto g = w.new_group({0, 1}, "reorder");
    auto a = torch::ones({4});
    auto b = torch::ones({2, 3});
    if (w.rank() == 0) {
      g->all_reduce(a, dist::ReduceOp::SUM, {"grad_norm"});
      g->broadcast(b, 0, {"sync"});
    } else {
      g->broadcast(b, 0, {"sync"});
      g->all_reduce(a, dist::ReduceOp::SUM, {"grad_norm"});
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = o.message[r];
    EXPECT_TRUE(has(m, "the ranks disagree at collective #1")) << m;
    EXPECT_TRUE(has(m, "rank 0 issued all_reduce(SUM) of [4] Float for module 'grad_norm'")) << m;
    EXPECT_TRUE(has(m, "rank 1 issued broadcast(root 0) of [2, 3] Float for module 'sync'")) << m;
  }
  std::printf("[ measured ] reordered collectives named after %.2f s (timeout 20 s)\n", o.seconds);
  EXPECT_LT(o.seconds, 12.0);
}

// FSDPP_COLLECTIVE_CHECK=1: the mismatch is found before the collective runs, at once.
TEST(CollectiveMismatch, CheckModeFindsItBeforeAnyDataMoves) {
  CheckModeEnv check;
  const auto o = run_two(std::chrono::seconds(20), [](dist::World& w) {
    auto g = w.new_group({0, 1}, "checked");
    auto in = torch::full({4}, static_cast<float>(w.rank()));
    auto out = torch::empty({8});
    g->all_gather_into_tensor(out, in, {"layers.0"});
    EXPECT_TRUE(torch::equal(out, torch::tensor({0, 0, 0, 0, 1, 1, 1, 1}, torch::kFloat)));
    // Same size, different module: Gloo would run it; the check refuses it.
    g->all_gather_into_tensor(out, in, {w.rank() == 0 ? "layers.1" : "layers.2"});
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = o.message[r];
    EXPECT_TRUE(has(m, "the ranks disagree at collective #2")) << m;
    EXPECT_TRUE(has(m, "'layers.1'") && has(m, "'layers.2'")) << m;
    EXPECT_TRUE(has(m, "found by FSDPP_COLLECTIVE_CHECK before it ran")) << m;
  }
  std::printf("[ measured ] check mode named the mismatch after %.2f s\n", o.seconds);
  EXPECT_LT(o.seconds, 5.0);
}

// FSDPP_COLLECTIVE_CHECK=1 with a rank that stops issuing collectives: the check names it.
TEST(CollectiveMismatch, CheckModeNamesARankThatStopped) {
  CheckModeEnv check;
  const auto o = run_two(std::chrono::seconds(2), [](dist::World& w) {
    auto g = w.new_group({0, 1}, "stopped");
    auto t = torch::ones({3});
    g->all_reduce(t, dist::ReduceOp::SUM, {"a"});
    if (w.rank() == 0) g->all_reduce(t, dist::ReduceOp::SUM, {"b"});
  });
  EXPECT_TRUE(has(o.message[0], "FSDPP_COLLECTIVE_CHECK: rank 1 (its last: #1, all_reduce(SUM) "
                                "of [3] Float for module 'a') did not reach collective #2"))
      << o.message[0];
  EXPECT_EQ(o.message[1], "");
}

// A group that failed runs nothing more: later collectives fail at once, naming the first error.
TEST(CollectiveMismatch, GroupIsUnusableAfterAFailure) {
  const auto o = run_two(std::chrono::seconds(1), [](dist::World& w) {
    auto g = w.new_group({0, 1}, "poisoned");
    if (w.rank() == 1) return;
    auto t = torch::ones({3});
    try {
      g->all_reduce(t, dist::ReduceOp::SUM, {"first"});
    } catch (const CommError&) {  // a timeout, or rank 1's connections closing
    }
    const auto t0 = Clock::now();
    try {
      g->all_reduce(t, dist::ReduceOp::SUM, {"second"});
    } catch (const CommError& e) {
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.5);
      throw;
    }
  });
  EXPECT_TRUE(has(o.message[0], "for module 'second': not run, because an earlier collective of "
                                "this group failed"))
      << o.message[0];
}

TEST(CollectiveMismatch, BadCheckVariableIsAConfigError) {
  setenv("FSDPP_COLLECTIVE_CHECK", "yes", 1);
  std::string m;
  try {
    test::run_ranks(1, [](dist::World&) {});
  } catch (const ConfigError& e) {
    m = e.what();
  }
  unsetenv("FSDPP_COLLECTIVE_CHECK");
  EXPECT_TRUE(has(m, "FSDPP_COLLECTIVE_CHECK='yes': expected 1")) << m;
}
