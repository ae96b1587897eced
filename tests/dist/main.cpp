// fsdpp_dist_tests: started on N ranks by fsdpp-run; every rank runs the same tests in the same
// order, so their collectives line up. A rank that cannot join fails the run: nothing skips.
#include <gtest/gtest.h>

#include <cstdio>

#include "world_fixture.h"

namespace {
std::shared_ptr<fsdpp::dist::World> g_world;
}

fsdpp::dist::World& fsdpp::test::world() { return *g_world; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    g_world = fsdpp::dist::init_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  // Only rank 0 prints gtest's report; others print failures only.
  if (g_world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  // Agree on the result so that one rank's failure fails every rank's exit code.
  auto failed = torch::full({1}, rc == 0 ? 0.0f : 1.0f);
  g_world->group()->all_reduce(failed, fsdpp::dist::ReduceOp::MAX);
  const bool any_failed = failed.item<float>() > 0;
  g_world.reset();
  return any_failed ? 1 : 0;
}
