// fsdpp_dist_tests: started on N ranks by fsdpp-run; every rank runs the same tests in the same
// order, so their collectives line up. A rank that cannot join fails the run: nothing skips.
#include <gtest/gtest.h>

#include <cstdio>

#include "ranked_gtest.h"
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
  const int rc = fsdpp::test::run_tests_on_every_rank(*g_world);
  g_world.reset();
  return rc;
}
